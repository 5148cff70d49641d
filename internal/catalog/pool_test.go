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
		p := parsePool(c.labels)
		if p.softLimit != c.limit || (p.dependsOn != nil) != c.deps || p.bad != c.bad {
			t.Errorf("%v: %d %v %q; want %d %v %q", c.labels, p.softLimit, p.dependsOn != nil, p.bad, c.limit, c.deps, c.bad)
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
