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
