package connection

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// listCounter counts the Lists of a fleet.Memory.
type listCounter struct {
	fleet.Memory
	lists atomic.Int32
}

func (c *listCounter) List(ctx context.Context, dir string, rec bool) ([]string, error) {
	c.lists.Add(1)
	return c.Memory.List(ctx, dir, rec)
}

// R5j, R5m: on Dicer, pool instances this Caddy does not route to cost no
// storage call; one it has requests in flight to is written and read.
func TestFleet_R5m_dicer_idle_pool_instances_cost_no_storage_calls(t *testing.T) {
	storage := &listCounter{}
	c := fleetConn(t, "caddy-a", storage)
	var insts []catalog.Instance
	for _, name := range []string{"p1", "p2", "p3", "p4", "p5"} {
		insts = append(insts, catalog.Instance{ID: "id-" + name, Name: name, State: catalog.StateRunning,
			Labels: map[string]string{catalog.LabelHost: "h", catalog.LabelSoftLimit: "1", catalog.LabelStandbyAfter: "1h"}})
	}
	c.catalog.Replace(insts)
	sleepers := c.catalog.Sleepers(nil)
	if len(sleepers) != len(insts) {
		t.Fatalf("sleepers %d", len(sleepers))
	}
	published := map[string]int{}
	_ = c.shareLoad(c.fleet, sleepers, published)
	if n := storage.lists.Load(); n != 0 {
		t.Errorf("5 idle pool instances: %d Lists, want 0", n)
	}
	sleepers[0].Activity.Touch(time.Now())
	_ = c.shareLoad(c.fleet, sleepers, published)
	if n := storage.lists.Load(); n != 1 {
		t.Errorf("one routed to: %d Lists, want 1", n)
	}
}

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
	calls := func(op string) float64 {
		return counterValue(t, metrics.fleetCalls.WithLabelValues("docker", addr, op))
	}
	if _, err := c.SetWeight(byName("web-1"), 3); err != nil {
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
