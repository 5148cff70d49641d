package catalog_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// An instance's dial address is worked out once per route, not per
// request (dialmemo.go): routes with other ports each get their own
// address, and requests of two sites on different ports taking turns
// allocate nothing, after the readiness probe resolved a third port; an
// instance that took another's address after it left is still spelt apart
// from it (R1d).
func TestDialMemory(t *testing.T) {
	var probe catalog.ProbeRequest
	c := catalog.New(catalog.Options{Probe: func(r catalog.ProbeRequest) { probe = r }})
	c.AddRoutePort(7070) // a third site's port, which the probe resolves too
	c.Put(inst("web-1", host("shop.example.com"), addr("10.0.0.7")))
	if !equal(probe.Dials, []string{"10.0.0.7:7070"}) {
		t.Fatalf("probe dials %q, want the route port's", probe.Dials)
	}
	c.MarkReady(probe.ID, probe.Gen, true)
	pick := func(port int) []string {
		ts, _ := c.Snapshot().Pick(nil, catalog.Route{Port: port}, "shop.example.com", false)
		return targets(ts)
	}
	for range 3 {
		if got := pick(8080); !equal(got, []string{"web-1 10.0.0.7:8080"}) {
			t.Fatalf("port 8080: %q", got)
		}
		if got := pick(9090); !equal(got, []string{"web-1 10.0.0.7:9090"}) {
			t.Fatalf("port 9090: %q", got)
		}
	}
	var buf [4]catalog.Target
	snap, a, b := c.Snapshot(), catalog.Route{Port: 8080}, catalog.Route{Port: 9090}
	if n := testing.AllocsPerRun(100, func() {
		snap.Pick(buf[:0], a, "shop.example.com", false)
		snap.Pick(buf[:0], b, "shop.example.com", false)
	}); n != 0 {
		t.Errorf("%v allocations per two picks on ports taking turns, want 0", n)
	}
	c.Stopping("id-web-1") // a copy of the entry, with its memory
	c.CancelStopping("id-web-1")
	if got := pick(8080); !equal(got, []string{"web-1 10.0.0.7:8080"}) {
		t.Errorf("after a copy: %q", got)
	}
	c.Delete("id-web-1")
	c.Put(inst("web-2", host("shop.example.com"), addr("10.0.0.7")))
	c.MarkReady(probe.ID, probe.Gen, true)
	got := pick(8080)
	if len(got) != 1 || got[0] == "web-2 10.0.0.7:8080" || !equal(unspelt(got), []string{"web-2 10.0.0.7:8080"}) {
		t.Errorf("a new instance at the address: %q, want 10.0.0.7:8080 spelt apart (R1d)", got)
	}
}
