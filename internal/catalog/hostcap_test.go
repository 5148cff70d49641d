package catalog_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// hostNames are n distinct names, h00000.example.com and on.
func hostNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("h%05d.example.com", i)
	}
	return names
}

// TestPut_R2c_host_label_over_the_caps_claims_nothing: a caddy.host label
// of 20,000 names (580 KB) claims no host, restricts its instance to no
// host, costs an update no more work than a one-name label (so it delays
// no other instance's update: the catalog's lock is held no longer), and
// is warned about once per label value, naming the instance, the label and
// the caps.
func TestPut_R2c_host_label_over_the_caps_claims_nothing(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	v := watch(c, "app=big")
	names := hostNames(20000)
	big := strings.Join(names, ",")
	c.Put(inst("other", host("other.example.com"), addr("10.0.0.3")))
	c.Put(inst("big", label("app", "big"), host(big)))

	snap := c.Snapshot()
	if n := snap.Hosts(); n != 1 {
		t.Errorf("Hosts() = %d, want 1 (other.example.com): the label over the caps claims nothing", n)
	}
	for _, name := range names {
		if claim := snap.ClaimOf(name, nil); claim != catalog.Unclaimed {
			t.Errorf("ClaimOf(%s) = %v, want Unclaimed (R7: the label is over the caps)", name, claim)
			break
		}
	}
	for _, route := range []catalog.Route{{Port: 8080}, {View: v, Port: 8080}} {
		if got := targets(snap.Targets(nil, route, names[0])); got != nil {
			t.Errorf("route %+v, host %s: targets %q, want none", route, names[0], got)
		}
		if got := targets(snap.Targets(nil, route, "any.example.net")); got != nil {
			t.Errorf("route %+v, host any.example.net: targets %q, want none (the label still restricts)", route, got)
		}
	}
	if got := request(c, nil, 8080, "other.example.com"); !equal(got, []string{"other 10.0.0.3:8080"}) {
		t.Errorf("other.example.com: targets %q, want other", got)
	}

	warned := func(step string, want int) {
		t.Helper()
		var got []string
		for _, e := range warnings(logs) {
			if strings.Contains(e.Message, "over the cap") {
				got = append(got, describe([]observer.LoggedEntry{e})...)
				m := e.ContextMap()
				if m["instance"] != "big" || !strings.Contains(e.Message, "caddy.host") ||
					!strings.Contains(e.Message, strconv.Itoa(catalog.MaxHostNames)+" names") ||
					!strings.Contains(e.Message, strconv.Itoa(catalog.MaxHostLabelBytes)+" bytes") {
					t.Errorf("%s: warning %q does not name the instance, the label and the caps", step, got[len(got)-1])
				}
				if s, _ := m["caddy.host"].(string); len(s) > 300 {
					t.Errorf("%s: warning carries %d bytes of the label, want it clipped", step, len(s))
				}
			}
		}
		if len(got) != want {
			t.Errorf("%s: %d warnings about the caps, want %d: %q", step, len(got), want, got)
		}
	}
	warned("first Put", 1)
	c.Put(inst("big", label("app", "big"), host(big), state(catalog.StateStopped)))
	c.Stopping("id-big")
	c.Started("id-big")
	c.Replace([]catalog.Instance{inst("big", label("app", "big"), host(big))})
	warned("same label value again", 0)
	c.Put(inst("big", label("app", "big"), host(big+",one.more.example.com")))
	warned("another label value over the caps", 1)

	// The work: a Put of the instance allocates no more than one of an
	// instance listing one name (e790bcf: about 10^5 allocations).
	c.Put(inst("small", host("small.example.com")))
	bigPut := testing.AllocsPerRun(5, func() { c.Put(inst("big", label("app", "big"), host(big))) })
	smallPut := testing.AllocsPerRun(5, func() { c.Put(inst("small", host("small.example.com"))) })
	if bigPut > smallPut+2 {
		t.Errorf("Put of the 20,000-name label: %v allocations, one of a one-name label %v: want no more", bigPut, smallPut)
	}
}

// TestPut_R2c_host_label_caps: the caps are on distinct names (duplicates
// and blank entries are not counted) and on the label's bytes.
func TestPut_R2c_host_label_caps(t *testing.T) {
	atCap := hostNames(catalog.MaxHostNames)
	longName := strings.Repeat("a", catalog.MaxHostLabelBytes-len(".example.com")) + ".example.com"
	for _, tc := range []struct {
		name   string
		label  string
		claims []string // the names claimed; nil: none
	}{
		{"R2c_at_the_name_cap", strings.Join(atCap, ","), atCap},
		{"R2c_duplicates_counted_once", strings.Join(atCap, ",") + "," + strings.ToUpper(atCap[0]) + ", ,," + atCap[1] + ".", atCap},
		{"R2c_one_name_over", strings.Join(hostNames(catalog.MaxHostNames+1), ","), nil},
		{"R2c_wildcards_counted", strings.Join(atCap, ",") + ",*.example.com", nil},
		{"R2c_at_the_byte_cap", longName, []string{longName}},
		{"R2c_one_byte_over", longName + ".", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := catalog.New(catalog.Options{})
			c.Put(inst("web", host(tc.label)))
			snap := c.Snapshot()
			if n := snap.Hosts(); n != len(tc.claims) {
				t.Errorf("Hosts() = %d, want %d", n, len(tc.claims))
			}
			for _, h := range tc.claims {
				if !snap.Claimed(h) || request(c, nil, 8080, h) == nil {
					t.Errorf("%s: not claimed and served", h[:min(len(h), 40)])
				}
			}
			c.Delete("id-web")
			if n := c.Snapshot().Hosts(); n != 0 {
				t.Errorf("after Delete: Hosts() = %d, want 0", n)
			}
		})
	}
}

// TestPut_R2c_label_change_reindexes_each_name_once: replacing a label of
// 100 names with one that shares half of them leaves the index as a
// rebuild would, in any order of the names.
func TestPut_R2c_label_change_reindexes_each_name_once(t *testing.T) {
	names := hostNames(150)
	c := catalog.New(catalog.Options{})
	c.Put(inst("a", host(strings.Join(names[:100], ","))))
	c.Put(inst("b", host(strings.Join(names[50:60], ",")), addr("10.0.0.3")))
	reversed := make([]string, 0, 100)
	for i := 149; i >= 50; i-- {
		reversed = append(reversed, names[i])
	}
	c.Put(inst("a", host(strings.Join(reversed, ","))))
	snap := c.Snapshot()
	if n := snap.Hosts(); n != 100 {
		t.Errorf("Hosts() = %d, want 100", n)
	}
	for i, h := range names {
		var want []string
		if i >= 50 {
			want = append(want, "a 10.0.0.2:8080")
		}
		if i >= 50 && i < 60 {
			want = append(want, "b 10.0.0.3:8080")
		}
		if got := request(c, nil, 8080, h); !equal(got, want) {
			t.Fatalf("%s: targets %q, want %q", h, got, want)
		}
	}
}
