package catalog

import "testing"

// R5q: caddy.max_requests is a whole number from 1 to MaxMaxRequests; any
// other value is ignored and named as bad. A routable target carries it.
func TestMaxRequests_R5q_label(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int32
		bad  bool
	}{
		{" 2 ", 2, false},
		{"100000", 100_000, false},
		{"0", 0, true},
		{"100001", 0, true},
		{"-1", 0, true},
		{"many", 0, true},
	} {
		p, bad := parsePool(map[string]string{LabelMaxRequests: c.raw})
		if p.maxRequests != c.want || (bad == LabelMaxRequests) != c.bad {
			t.Errorf("%q: %d, bad %q; want %d, bad %v", c.raw, p.maxRequests, bad, c.want, c.bad)
		}
	}
	if p, bad := parsePool(map[string]string{}); p.maxRequests != 0 || bad != "" {
		t.Errorf("no label: %d, bad %q", p.maxRequests, bad)
	}
}

// R5q: a route's capacity is the sum of its targets' limits, the route's
// default standing in for a missing label; no limit as soon as one target
// has none.
func TestCapacity_R5q(t *testing.T) {
	two, none := Target{MaxRequests: 2}, Target{}
	for _, c := range []struct {
		targets  []Target
		fallback int
		want     int
	}{
		{[]Target{two, two}, 0, 4},
		{[]Target{two, none}, 0, 0},
		{[]Target{two, none}, 3, 5},
		{[]Target{none}, 1, 1},
		{nil, 5, 0},
	} {
		if got := Capacity(c.targets, c.fallback); got != c.want {
			t.Errorf("%v default %d: capacity %d, want %d", c.targets, c.fallback, got, c.want)
		}
	}
}

// R5q, R5j: a pool whose route has requests waiting grows, even under its
// soft limit; one without a soft limit does not.
func TestPool_R5q_Loaded_by_the_queue(t *testing.T) {
	a := NewActivity()
	a.Begin().Learn("a:1", count(1))
	targets := []Target{{Activity: a, SoftLimit: 4, MaxRequests: 1}}
	if Loaded(targets) {
		t.Fatal("1 in flight under a soft limit of 4, none waiting: loaded")
	}
	MarkQueued(targets)
	if !Loaded(targets) {
		t.Fatal("requests waiting for a slot: not loaded")
	}
	plain := []Target{{Activity: a, MaxRequests: 1}}
	MarkQueued(plain)
	if Loaded(plain) {
		t.Fatal("no soft limit: loaded")
	}
}
