package heal

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1e, a hostile tenant: 30 containers labelled with the victim's host,
// never restarted, unhealthy (caddy.heal=1s) a minute before the victim
// turns unhealthy, each staying "starting" after its restart (so that it
// holds the group for restartWatch). They fell due before the victim, so
// the line (never restarted first, then the oldest due) puts all 30
// ahead of it: how long is the victim's restart held back?
func TestHeal_R1e_fresh_decoys_due_first_hold_a_restart_back(t *testing.T) {
	openFinding(t)
	r := newRig(t, nil, 0)
	const host = "shop.example.com"
	others := map[string]catalog.Instance{}
	for i := range 30 {
		inst := container(fmt.Sprintf("x%02d", i), host, "1s", catalog.HealthUnhealthy)
		others[inst.ID] = inst
		r.h.Observe(inst)
	}
	r.h.Observe(container("v", host, "30s", catalog.HealthHealthy))
	const step = 2 * time.Second
	look := func() []string {
		n := r.fake.count()
		r.look()
		var victims []string
		for _, id := range r.fake.restarts[n:] {
			if inst, ok := others[id]; ok {
				inst.Health = catalog.HealthStarting
				r.h.Observe(inst)
			} else {
				victims = append(victims, id)
			}
		}
		return victims
	}
	start := r.clk.now()
	for r.clk.now().Sub(start) < 30*time.Second {
		look()
		r.clk.step(step)
	}
	broke := r.clk.now()
	r.h.Observe(container("v", host, "30s", catalog.HealthUnhealthy))
	var after time.Duration
	for r.clk.now().Sub(broke) < 3*time.Hour && after == 0 {
		if v := look(); len(v) > 0 {
			after = r.clk.now().Sub(broke)
		}
		r.clk.step(step)
	}
	within := 30*time.Second + restartWatch + step
	t.Logf("victim restarted %v after its verdict (%d restarts of the decoys before)", after, r.fake.count()-1)
	if after == 0 || after > within {
		t.Fatalf("the victim restarted %v after it turned unhealthy, want within %v", after, within)
	}
}

// openFinding skips a hostile tenant's attack that still succeeds (issue
// 42's tenant review: the report says where and why it is not fixed
// here) unless DICER_OPEN_FINDINGS is set, so that it can be run at will.
func openFinding(t *testing.T) {
	t.Helper()
	if os.Getenv("DICER_OPEN_FINDINGS") == "" {
		t.Skip("an open finding of the tenant review; set DICER_OPEN_FINDINGS=1 to run it")
	}
}
