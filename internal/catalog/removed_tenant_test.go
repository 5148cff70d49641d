package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// removeAsleep puts inst, asleep a minute, and removes it.
func removeAsleep(c *Catalog, inst Instance) {
	c.Put(inst)
	backdate(c, inst.ID, time.Minute)
	c.Delete(inst.ID)
}

// R5o: a hostile tenant that creates and removes many standby containers
// forgets its own records, not another tenant's: under one domain of its
// own, or spread over a domain per container (then another tenant keeps
// at least its newest record); a tenant routed by selector alone keeps its
// own too.
func TestRemovedSleepers_R5o_one_tenants_churn_forgets_only_its_own(t *testing.T) {
	for _, spread := range []bool{false, true} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) {
			c := New(Options{})
			v := c.Watch(selector.MustParse("team=blue"))
			defer c.Unwatch(v)
			c.Replace(nil)
			for i := range 3 {
				removeAsleep(c, sleeperInst(fmt.Sprintf("victim%d", i), fmt.Sprintf("app%d.victim.example", i), StateStopped))
			}
			removeAsleep(c, Instance{ID: "blue", Name: "blue", State: StateStopped,
				Labels: map[string]string{"team": "blue", LabelStandbyAfter: "1m"}})
			for i := range 3 * MaxRemovedSleepers {
				host := fmt.Sprintf("x%d.evil.example", i)
				if spread {
					host = fmt.Sprintf("x.evil%d.example", i)
				}
				removeAsleep(c, sleeperInst(fmt.Sprintf("evil%d", i), host, StateStopped))
			}
			if n := len(c.RemovedSleepers()); n != MaxRemovedSleepers {
				t.Errorf("%d remembered, want the bound %d", n, MaxRemovedSleepers)
			}
			kept := 0
			for i := range 3 {
				if _, ok := c.RemovedSleeper(Route{}, fmt.Sprintf("app%d.victim.example", i)); ok {
					kept++
				}
			}
			switch {
			case !spread && kept != 3:
				t.Errorf("the victim keeps %d of its 3 records, want all: another tenant's churn under its own domain forgot them", kept)
			case spread && kept < 1:
				t.Error("the victim keeps none of its records: a churn spread over many domains forgot its last")
			}
			if _, ok := c.RemovedSleeper(Route{View: v}, "any.host"); !ok {
				t.Error("the tenant routed by selector lost its record to another's churn")
			}
			if !spread {
				// The churning tenant keeps its newest, up to what is left.
				if _, ok := c.RemovedSleeper(Route{}, fmt.Sprintf("x%d.evil.example", 3*MaxRemovedSleepers-1)); !ok {
					t.Error("the churning tenant's newest record is not remembered")
				}
			}
		})
	}
}
