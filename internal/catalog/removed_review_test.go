package catalog

import (
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
