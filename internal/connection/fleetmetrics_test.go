package connection

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// R5m: every call the fleet makes of its storage is counted in
// caddy_dicer_fleet_storage_calls_total{op}, the switches' too; the
// leases a connection holds go when it closes.
func TestFleet_R5m_storage_calls_counted_and_leases_released_at_close(t *testing.T) {
	storage := &fleet.Memory{}
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{{ID: "id-1", Name: "web-1", State: catalog.StateRunning}})
	const addr = "unix:///calls.sock"
	c := Fixture{Kind: "docker", Address: addr, Catalog: cat}.Conn()
	c.ShareThrough(storage, fleet.Self{ID: "me"})
	// The counters are the process's: the test counts what its run adds
	// to them, so that go test -count=N passes too.
	before := map[string]float64{}
	for _, op := range []string{"load", "store", "delete"} {
		before[op] = counterValue(t, metrics.fleetCalls.WithLabelValues("docker", addr, op))
	}
	calls := func(op string) float64 {
		return counterValue(t, metrics.fleetCalls.WithLabelValues("docker", addr, op)) - before[op]
	}
	if _, _, err := c.SetWeight(byName("web-1"), 3); err != nil {
		t.Fatal(err)
	}
	if calls("load") < 1 || calls("store") != 1 {
		t.Errorf("after a weight: load %v, store %v", calls("load"), calls("store"))
	}
	ctx := context.Background()
	now := time.Now()
	_ = c.fleet.Publish(ctx, "swarm-service-x", fleet.Lease{LastUse: now, InFlight: 1, Expires: now.Add(time.Hour)})
	if keys, _ := storage.List(ctx, "dicer/fleet/leases/swarm-service-x", false); len(keys) != 1 {
		t.Fatalf("lease keys %v", keys)
	}
	_ = c.Destruct()
	if keys, _ := storage.List(ctx, "dicer/fleet/leases/swarm-service-x", false); len(keys) != 0 {
		t.Errorf("leases left after the connection closed: %v", keys)
	}
	if calls("delete") != 1 {
		t.Errorf("deletes counted %v, want 1", calls("delete"))
	}
}
