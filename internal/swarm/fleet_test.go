package swarm

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R5j in a fleet: a service this Caddy sends nothing to, while another
// Caddy of the fleet has 3 requests in flight to it, does not shrink from
// 2 replicas to 1 (soft limit 2: 3 do not fit in one), and each task
// carries its share of the fleet's load (2 of 3 over 2 tasks, rounded up);
// once the other's load ends, the service shrinks after standby_after.
func TestScale_R5j_shrinks_on_the_fleets_load(t *testing.T) {
	f := newFakeSwarm()
	pool(f, 2, map[string]string{catalog.LabelSoftLimit: "2", catalog.LabelMaxReplicas: "4",
		catalog.LabelMinReplicas: "1", catalog.LabelStandbyAfter: "2s"})
	sc := startScaled(t, f)
	ts := sc.targets(t, 2)
	storage := &fleet.Memory{}
	mine, other := fleet.New(fleet.Self{ID: "me"}), fleet.New(fleet.Self{ID: "other"})
	mine.SetStorage(storage)
	other.SetStorage(storage)
	sc.s.ShareThrough(mine, nil)
	ctx := context.Background()
	key := serviceLease("web")
	renew := func(inFlight int) { // as the other Caddy does every second (a lease far ahead is refused, R5m)
		now := sc.clock.Now()
		if err := other.Publish(ctx, key, fleet.Lease{LastUse: now, InFlight: inFlight, Expires: now.Add(fleet.LeaseTTL(time.Second))}); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 { // 6 s: three times standby_after
		renew(3)
		sc.waitSamples(t, 2)
		sc.clock.Add(time.Second)
	}
	renew(3)
	sc.waitSamples(t, 2)
	if n := f.Calls("ServiceUpdate"); n != 0 {
		t.Fatalf("%d updates while the fleet's load needs 2 replicas", n)
	}
	for _, tg := range ts {
		if n := tg.Activity.Load(); n != 2 {
			t.Errorf("task %s carries a load of %d, want its share of the fleet's, 2", tg.Instance, n)
		}
	}
	renew(0)
	sc.waitSamples(t, 2) // the fit starts
	sc.clock.Add(2100 * time.Millisecond)
	testkit.Eventually(t, wait, "1 replica once the fleet's load fits", func() bool { return sc.replicas() == 1 })
}
