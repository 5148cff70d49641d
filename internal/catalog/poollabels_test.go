package catalog

import (
	"strings"
	"testing"
)

// R5j, R5k: caddy.soft_limit is a whole number from 1 to MaxSoftLimit,
// caddy.depends_on a non-empty selector of bounded size; any other value
// is ignored and named as bad.
func TestPool_labels(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		limit  int32
		deps   bool
		bad    string
	}{
		{map[string]string{}, 0, false, ""},
		{map[string]string{LabelSoftLimit: " 20 "}, 20, false, ""},
		{map[string]string{LabelSoftLimit: "0"}, 0, false, LabelSoftLimit},
		{map[string]string{LabelSoftLimit: "2000000"}, 0, false, LabelSoftLimit},
		{map[string]string{LabelSoftLimit: "x"}, 0, false, LabelSoftLimit},
		{map[string]string{LabelDependsOn: "role=db"}, 0, true, ""},
		{map[string]string{LabelDependsOn: " "}, 0, false, LabelDependsOn},
		{map[string]string{LabelDependsOn: "role=("}, 0, false, LabelDependsOn},
		{map[string]string{LabelDependsOn: "a=" + strings.Repeat("b", MaxDependsOnBytes)}, 0, false, LabelDependsOn},
	} {
		p, bad := parsePool(c.labels)
		if p.softLimit != c.limit || (p.dependsOn != nil) != c.deps || bad != c.bad {
			t.Errorf("%v: %d %v %q; want %d %v %q", c.labels, p.softLimit, p.dependsOn != nil, bad, c.limit, c.deps, c.bad)
		}
	}
}

type count int

func (c count) NumRequests() int { return int(c) }

// R5j: a pool is loaded when every target has a soft limit and more in
// flight than it.
func TestPool_Loaded(t *testing.T) {
	busy, idle := NewActivity(), NewActivity()
	busy.Begin().Learn("a:1", count(5))
	idle.Begin().Learn("b:1", count(2))
	if !Loaded([]Target{{Activity: busy, SoftLimit: 4}}) {
		t.Error("5 in flight over a soft limit of 4: not loaded")
	}
	if Loaded([]Target{{Activity: busy, SoftLimit: 4}, {Activity: idle, SoftLimit: 4}}) {
		t.Error("one target under its soft limit: loaded")
	}
	if Loaded([]Target{{Activity: busy}}) || Loaded(nil) {
		t.Error("no soft limit, or no target: loaded")
	}
}

// R5j: a request whose counter is being learnt counts once for the soft
// limit, also once another request learnt the counter that holds it
// (InFlight counts it twice then, as it should for the idle loop).
func TestPool_Loaded_counts_a_request_being_learnt_once(t *testing.T) {
	a := NewActivity()
	for range 3 { // a woken instance's first requests, its counter not known yet
		a.Begin()
	}
	loaded := []Target{{Activity: a, SoftLimit: 2}}
	if !Loaded(loaded) || a.Load() != 3 {
		t.Fatalf("3 requests being learnt: Load %d, loaded %v; want 3, true", a.Load(), Loaded(loaded))
	}
	a.Learn("a:1", count(2)) // the first ends; the counter holds the 2 others
	if a.Load() != 2 || Loaded(loaded) {
		t.Errorf("2 in flight once learnt: Load %d, loaded %v; want 2, false", a.Load(), Loaded(loaded))
	}
	if a.InFlight() != 4 {
		t.Errorf("InFlight %d, want 4 (each request being learnt counts until it ends)", a.InFlight())
	}
}

// R5j on Swarm: caddy.max_replicas and caddy.min_replicas are whole
// numbers from 1 to MaxReplicas, the min no more than the max; a bad max
// leaves the service unscaled, a bad min counts as 1.
func TestPool_replica_labels(t *testing.T) {
	for _, c := range []struct {
		labels   map[string]string
		min, max int
		bad      string
	}{
		{map[string]string{}, 1, 0, ""},
		{map[string]string{LabelMinReplicas: "3"}, 1, 0, ""}, // no max: not scaled, nothing to warn
		{map[string]string{LabelMaxReplicas: " 4 "}, 1, 4, ""},
		{map[string]string{LabelMaxReplicas: "4", LabelMinReplicas: "2"}, 2, 4, ""},
		{map[string]string{LabelMaxReplicas: "4", LabelMinReplicas: "4"}, 4, 4, ""},
		{map[string]string{LabelMaxReplicas: "4", LabelMinReplicas: "5"}, 1, 4, LabelMinReplicas},
		{map[string]string{LabelMaxReplicas: "4", LabelMinReplicas: "0"}, 1, 4, LabelMinReplicas},
		{map[string]string{LabelMaxReplicas: "0"}, 1, 0, LabelMaxReplicas},
		{map[string]string{LabelMaxReplicas: "101"}, 1, 0, LabelMaxReplicas},
		{map[string]string{LabelMaxReplicas: "many"}, 1, 0, LabelMaxReplicas},
	} {
		r, bad := ParseReplicas(c.labels)
		if r.Min != c.min || r.Max != c.max || bad != c.bad {
			t.Errorf("%v: min %d max %d bad %q; want %d %d %q", c.labels, r.Min, r.Max, bad, c.min, c.max, c.bad)
		}
	}
}

// A group (a Swarm service with endpoint tasks) labelled
// caddy.standby_after is never a candidate to wake: it is never routed to.
func TestPool_group_is_never_woken(t *testing.T) {
	c := New(Options{})
	c.Replace([]Instance{{ID: "svc", Name: "web", Group: true, State: StateStopped,
		Labels: map[string]string{LabelHost: "web.test", LabelStandbyAfter: "2s", LabelSoftLimit: "2"}}})
	snap := c.Snapshot()
	if ts, pick := snap.Pick(nil, Route{}, "web.test", false); len(ts) != 0 || pick != PickedNone {
		t.Errorf("Pick: %v %v, want nothing", ts, pick)
	}
	if cands := snap.WakeCandidates(nil, Route{}, "web.test"); len(cands) != 0 {
		t.Errorf("WakeCandidates: %v, want none", cands)
	}
	if running, standby := c.PoolCounts(); running+standby != 0 {
		t.Errorf("PoolCounts: %d running, %d on standby; want none", running, standby)
	}
}
