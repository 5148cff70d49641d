package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// sleeperInst is a container labelled for scale to zero, claiming host,
// in state.
func sleeperInst(id, host string, state State) Instance {
	return Instance{ID: id, Name: "n-" + id, State: state, Image: "img",
		Labels: map[string]string{"app": "x", LabelHost: host, LabelStandbyAfter: "1m"}}
}

// backdate makes the instance id asleep since d ago, as if the catalog had
// seen it go on standby then.
func backdate(c *Catalog, id string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID[id].asleepSince = time.Now().Add(-d).UnixNano()
}

// R5o: an instance removed after asleepFor on standby is remembered for
// its host until a new instance claims the host; one removed a moment
// after it stopped (docker rm -f of a running container) is not; the
// lifecycle hears the removal.
func TestRemovedSleepers_R5o_remembered_until_claimed(t *testing.T) {
	var heard []Change
	c := New(Options{Lifecycle: func(ch Change, _ Instance, _ []string, _ string) { heard = append(heard, ch) }})
	v := c.Watch(selector.MustParse("app=x"))
	defer c.Unwatch(v)
	c.Replace(nil)
	c.Put(sleeperInst("a", "a.test", StateStopped))
	backdate(c, "a", time.Minute)
	c.Delete("a")
	c.Put(sleeperInst("b", "b.test", StateStopped)) // asleep a moment only
	c.Delete("b")
	list := c.RemovedSleepers()
	if len(list) != 1 || list[0].ID != "a" || list[0].Hosts[0] != "a.test" || list[0].Name != "n-a" {
		t.Fatalf("removed sleepers: %+v, want a alone", list)
	}
	if r, ok := c.RemovedSleeper(Route{}, "a.test"); !ok || r.ID != "a" {
		t.Errorf("RemovedSleeper(a.test) = %+v, %v", r, ok)
	}
	if _, ok := c.RemovedSleeper(Route{}, "b.test"); ok {
		t.Error("b, asleep a moment only, is remembered")
	}
	if _, ok := c.RemovedSleeper(Route{View: v}, "a.test"); !ok {
		t.Error("a selector route that matched a does not find it")
	}
	if !containsChange(heard, Removed) {
		t.Errorf("lifecycle heard %v, want a Removed", heard)
	}
	c.Put(Instance{ID: "new", Name: "other", State: StateRunning, Labels: map[string]string{LabelHost: "a.test"}})
	if list := c.RemovedSleepers(); len(list) != 0 {
		t.Errorf("a.test claimed again, still remembered: %+v", list)
	}
}

func containsChange(list []Change, ch Change) bool {
	for _, x := range list {
		if x == ch {
			return true
		}
	}
	return false
}

// R5o: at most MaxRemovedSleepers, a tenant's oldest forgotten first;
// none older than RemovedSleeperAge.
func TestRemovedSleepers_R5o_bounded_in_count_and_age(t *testing.T) {
	c := New(Options{})
	c.Replace(nil)
	n := MaxRemovedSleepers + 44
	for i := range n {
		id := fmt.Sprintf("s%03d", i)
		c.Put(sleeperInst(id, id+".one.test", StateStopped))
		backdate(c, id, time.Minute)
		c.Delete(id)
	}
	list := c.RemovedSleepers()
	if len(list) != MaxRemovedSleepers || list[0].ID != "s044" || list[len(list)-1].ID != fmt.Sprintf("s%03d", n-1) {
		t.Fatalf("%d remembered, from %s to %s; want %d, the newest", len(list), list[0].ID, list[len(list)-1].ID, MaxRemovedSleepers)
	}
	// Age: the record's dates are what the reader checks against its clock.
	c.mu.Lock()
	old := *c.removed.Load()
	aged := make(removedSleepers, len(old))
	copy(aged, old)
	for i := range aged[:10] {
		aged[i].RemovedAt = time.Now().Add(-RemovedSleeperAge - time.Minute)
	}
	c.removed.Store(&aged)
	c.mu.Unlock()
	if got := len(c.RemovedSleepers()); got != MaxRemovedSleepers-10 {
		t.Errorf("%d remembered, want %d: those over %s are forgotten", got, MaxRemovedSleepers-10, RemovedSleeperAge)
	}
	if _, ok := c.RemovedSleeper(Route{}, "s044.one.test"); ok {
		t.Error("one over the age is still found")
	}
}
