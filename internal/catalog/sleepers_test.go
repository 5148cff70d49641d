package catalog

import (
	"testing"
)

// R5l: the sleeper feed reports every labelled instance at its first
// read, then only those that changed (a sleeper, a dependent, one gone),
// never an unlabelled one.
func TestSleepers_R5l_changes_only(t *testing.T) {
	c := New(Options{})
	sleeper := Instance{ID: "s", Name: "s", State: StateRunning, Labels: map[string]string{LabelStandbyAfter: "1m"}}
	dependent := Instance{ID: "d", Name: "d", State: StateRunning, Labels: map[string]string{LabelDependsOn: "role=db"}}
	plain := Instance{ID: "p", Name: "p", State: StateRunning, Labels: map[string]string{"app": "x"}}
	c.Replace([]Instance{sleeper, dependent, plain})
	signal := c.SleeperChanges()
	take := func() map[string]SleeperChange {
		got := map[string]SleeperChange{}
		for _, ch := range c.TakeSleeperChanges(nil) {
			got[ch.ID] = ch
		}
		return got
	}
	<-signal
	got := take()
	if len(got) != 2 || !got["s"].IsSleeper || got["s"].Dependent != nil || got["d"].Dependent == nil || got["d"].IsSleeper {
		t.Fatalf("first read: %+v, want s (a sleeper) and d (a dependent)", got)
	}
	if got := take(); len(got) != 0 {
		t.Fatalf("read again: %+v, want nothing", got)
	}
	plain.Labels["v"] = "2"
	c.Put(plain)
	select {
	case <-signal:
		t.Fatal("signalled for an unlabelled instance")
	default:
	}
	c.Stopping("s")
	<-signal
	got = take()
	if len(got) != 1 || got["s"].Sleeper.State != StateStopping {
		t.Fatalf("after a stop event: %+v, want s stopping", got)
	}
	c.Delete("d")
	<-signal
	if got := take(); len(got) != 1 || !got["d"].Gone() {
		t.Fatalf("after a delete: %+v, want d gone", got)
	}
	if s, ok := c.Sleeper("s"); !ok || s.ID != "s" {
		t.Fatalf("Sleeper(s) = %+v, %v", s, ok)
	}
	if _, ok := c.Sleeper("p"); ok {
		t.Fatal("Sleeper(p) found an unlabelled instance")
	}
}
