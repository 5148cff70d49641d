package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// R5o, an outsider who picks the host (review s48): a removed sleeper's
// record (its container name and ID, on the 503 page) is shown only for a
// host it served. One whose caddy.host label claims a wildcard, or is
// over the label's cap (it served no host), is not shown for any host a
// client picks on a selector route; the wildcard's own hosts still are.
func TestRemovedSleeper_R5o_only_for_a_host_it_served(t *testing.T) {
	for _, tc := range []struct {
		label, host string
		shown       bool
	}{
		{"*.tenant-a.test", "x.tenant-b.test", false},
		{"*.tenant-a.test", "tenant-b.test", false},
		{"*.tenant-a.test", "x.tenant-a.test", true},
		{"a.test, *.tenant-a.test", "other.test", false},
		{"a.test, *.tenant-a.test", "a.test", true},
		{"", "anything.test", true}, // no caddy.host: served every host of the selector route
	} {
		c := New(Options{})
		v := c.Watch(selector.MustParse("app=x"))
		c.Replace(nil)
		inst := sleeperInst("a", tc.label, StateStopped)
		if tc.label == "" {
			delete(inst.Labels, LabelHost)
		}
		c.Put(inst)
		backdate(c, "a", time.Minute)
		c.Delete("a")
		if _, ok := c.RemovedSleeper(Route{View: v}, tc.host); ok != tc.shown {
			t.Errorf("caddy.host=%q removed, request for %q on a selector route: shown %v, want %v", tc.label, tc.host, ok, tc.shown)
		}
		c.Unwatch(v)
	}
}

// R5o, R15 (review s48): a removed sleeper's record outlives its
// container by up to RemovedSleeperAge, so what it keeps of tenant text
// is bounded: labels past maxRemovedLabelBytes are not kept (its
// caddy.host hosts still show its page), nor a name past the page's.
func TestRemovedSleepers_R5o_record_bounded_in_bytes(t *testing.T) {
	c := New(Options{})
	c.Replace(nil)
	inst := sleeperInst("a", "a.test", StateStopped)
	inst.Name = strings.Repeat("n", 1<<20)
	inst.Labels["junk"] = strings.Repeat("x", 1<<20)
	c.Put(inst)
	backdate(c, "a", time.Minute)
	c.Delete("a")
	list := c.RemovedSleepers()
	if len(list) != 1 {
		t.Fatalf("removed sleepers: %d, want 1", len(list))
	}
	size := len(list[0].Name)
	for k, v := range list[0].Labels {
		size += len(k) + len(v)
	}
	if size > 64<<10 {
		t.Errorf("the record keeps %d bytes of the tenant's name and labels; want at most 64 KiB", size)
	}
	if _, ok := c.RemovedSleeper(Route{}, "a.test"); !ok {
		t.Error("its host no longer finds it")
	}
}
