package catalog_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// sleeps labels the instance caddy.standby_after=d (scale to zero).
func sleeps(d string) opt { return label(catalog.LabelStandbyAfter, d) }

func candidateNames(cs []catalog.WakeCandidate) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// Scale to zero on Docker: which instances a request may wake, in R5's
// order.
func TestStandby_WakeCandidates(t *testing.T) {
	route := catalog.Route{Port: 8080}
	for _, tc := range []struct {
		name  string
		insts []catalog.Instance
		want  []string
	}{
		{"stopped, labelled", []catalog.Instance{inst("a", host("h"), sleeps("1m"), state(catalog.StateStopped), addr(""))}, []string{"a"}},
		{"paused, labelled", []catalog.Instance{inst("a", host("h"), sleeps("1m"), state(catalog.StatePaused))}, []string{"a"}},
		{"stopped, not labelled", []catalog.Instance{inst("a", host("h"), state(catalog.StateStopped))}, nil},
		{"bad label", []catalog.Instance{inst("a", host("h"), sleeps("soon"), state(catalog.StateStopped))}, nil},
		{"bad mode", []catalog.Instance{inst("a", host("h"), sleeps("1m"), label(catalog.LabelStandby, "freeze"), state(catalog.StateStopped))}, nil},
		{"restarting (crash loop) is never one", []catalog.Instance{inst("a", host("h"), sleeps("1m"), state(catalog.StateRestarting))}, nil},
		{"dead is never one", []catalog.Instance{inst("a", host("h"), sleeps("1m"), state(catalog.StateFailed))}, nil},
		{"other host", []catalog.Instance{inst("a", host("other"), sleeps("1m"), state(catalog.StateStopped))}, nil},
		{"name order", []catalog.Instance{
			inst("b", host("h"), sleeps("1m"), state(catalog.StateStopped)),
			inst("a", host("h"), sleeps("1m"), state(catalog.StatePaused)),
		}, []string{"a", "b"}},
		{"one on its way up comes first", []catalog.Instance{
			inst("a", host("h"), sleeps("1m"), state(catalog.StateStopped)),
			inst("b", host("h"), sleeps("1m"), health(catalog.HealthStarting)),
		}, []string{"b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := catalog.New(catalog.Options{})
			c.Replace(tc.insts)
			got := candidateNames(c.Snapshot().WakeCandidates(nil, route, "h"))
			if !slices.Equal(got, tc.want) {
				t.Errorf("candidates %v, want %v", got, tc.want)
			}
		})
	}
}

// An instance being put on standby (Stopping from Caddy) is a candidate,
// to wake once down; CancelStopping puts it back in its rotations.
func TestStandby_stopping_and_cancel(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{inst("a", host("h"), sleeps("1m"))})
	route := catalog.Route{Port: 8080}
	if got := targets(c.Snapshot().Targets(nil, route, "h")); len(got) != 1 {
		t.Fatalf("targets %v", got)
	}
	c.Stopping("id-a")
	if got := c.Snapshot().Targets(nil, route, "h"); len(got) != 0 {
		t.Fatalf("targets while stopping: %v", got)
	}
	if got := candidateNames(c.Snapshot().WakeCandidates(nil, route, "h")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("candidates while stopping: %v", got)
	}
	c.CancelStopping("id-a")
	if got := c.Snapshot().Targets(nil, route, "h"); len(got) != 1 {
		t.Fatalf("targets after CancelStopping: %v", got)
	}
}

// Changed is closed by the next publish, and only then.
func TestStandby_Changed(t *testing.T) {
	c := catalog.New(catalog.Options{})
	snap := c.Snapshot()
	select {
	case <-snap.Changed():
		t.Fatal("closed before any change")
	default:
	}
	c.Put(inst("a"))
	select {
	case <-snap.Changed():
	default:
		t.Fatal("not closed by a Put")
	}
	next := c.Snapshot()
	c.MarkReady("id-a", 99, true) // an answer to no probe: no change
	select {
	case <-next.Changed():
		t.Fatal("closed without a change")
	default:
	}
}

// The Activity of a labelled instance survives its changes; an unlabelled
// one has none, so its requests record nothing.
func TestStandby_Activity(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("a", host("h"), sleeps("1m")))
	c.Put(inst("b", host("h")))
	route := catalog.Route{Port: 8080}
	ts := c.Snapshot().Targets(nil, route, "h")
	if len(ts) != 2 || ts[0].Activity == nil || ts[1].Activity != nil {
		t.Fatalf("targets %+v: want an Activity for a only", ts)
	}
	act := ts[0].Activity
	if !act.Touch(time.Now()) || act.Touch(time.Now()) {
		t.Error("Touch reports the first request only")
	}
	c.Put(inst("a", host("h"), sleeps("2m"), addr("10.0.0.9")))
	if got := c.Snapshot().Targets(nil, route, "h")[0].Activity; got != act {
		t.Error("a change of the instance lost its Activity")
	}
	act.Begin()
	if act.InFlight() != 1 {
		t.Errorf("a request whose counter is not known counts as in flight: %d", act.InFlight())
	}
	now := time.Now()
	if !act.Learning("10.0.0.9:8080", now) {
		t.Error("a dial address with no counter known: not learning")
	}
	act.Learn("10.0.0.9:8080", fixedCount(3))
	if act.InFlight() != 3 {
		t.Errorf("in flight %d, want the counter's 3", act.InFlight())
	}
	sl := c.Sleepers(nil)
	if len(sl) != 1 || sl[0].Name != "a" || sl[0].Policy.After != 2*time.Minute || !sl[0].Ready {
		t.Errorf("sleepers %+v", sl)
	}
}

type fixedCount int

func (n fixedCount) NumRequests() int { return int(n) }

// counter is an InFlight counter a test sets.
type counter struct{ n atomic.Int32 }

func (c *counter) NumRequests() int { return int(c.n.Load()) }

// Issue 18 (suspected, confirmed): reverse_proxy drops a dynamic
// upstream's in-flight counter after an hour without a request and makes a
// new one: the counter is learnt again from a request once per
// RelearnEvery, and an older counter is kept while it has requests in
// flight, so a request on either counts.
func TestStandby_Activity_relearns_counters(t *testing.T) {
	a := catalog.NewActivity()
	const dial = "10.0.0.9:8080"
	t0 := time.Now()
	old, renewed := new(counter), new(counter)
	if !a.Learning(dial, t0) {
		t.Fatal("first request: not learning")
	}
	a.Begin().Learn(dial, old)
	if a.Learning(dial, t0.Add(time.Minute)) {
		t.Error("learning again a minute later")
	}
	old.n.Store(1) // a websocket on the old counter
	later := t0.Add(catalog.RelearnEvery + time.Minute)
	if !a.Learning(dial, later) || a.Learning(dial, later) {
		t.Fatal("after RelearnEvery: want one request learning")
	}
	a.Begin().Learn(dial, renewed) // reverse_proxy's new counter
	renewed.n.Store(1)
	if got := a.InFlight(); got != 2 {
		t.Errorf("in flight %d, want 2 (one on each counter)", got)
	}
	old.n.Store(0)
	if got := a.InFlight(); got != 1 {
		t.Errorf("in flight %d once the old counter's request ended, want the new one's 1", got)
	}
	a.Begin().Learn(dial, new(counter)) // the old counter, idle, is dropped
	renewed.n.Store(0)
	old.n.Store(5)
	if got := a.InFlight(); got != 0 {
		t.Errorf("in flight %d, want 0: idle counters are not kept", got)
	}
}

// R5f: Activities linked to one shared Activity (one per catalog that
// follows the Engine) count together: a request through any of them,
// begun before or after the link, keeps all of them busy, and the latest
// request time is theirs.
func TestStandby_Activity_linked(t *testing.T) {
	a, b, shared := catalog.NewActivity(), catalog.NewActivity(), catalog.NewActivity()
	early := a.Begin() // before the link: still counted once linked
	t0 := time.Now()
	a.Touch(t0)
	a.Link(shared)
	b.Link(shared)
	if b.InFlight() != 1 || shared.InFlight() != 1 {
		t.Errorf("in flight through b %d, shared %d; want a's 1", b.InFlight(), shared.InFlight())
	}
	if !b.Last().Equal(t0) {
		t.Errorf("b's last request %v, want a's %v", b.Last(), t0)
	}
	late := b.Begin()
	early.Learn("d", nil)
	if a.InFlight() != 1 {
		t.Errorf("in flight through a %d, want b's 1", a.InFlight())
	}
	late.Learn("d", fixedCount(2))
	if a.InFlight() != 2 {
		t.Errorf("in flight through a %d, want the counter learnt through b: 2", a.InFlight())
	}
	b.Touch(t0.Add(time.Second))
	if !a.Last().Equal(t0.Add(time.Second)) {
		t.Errorf("a: last %v", a.Last())
	}
	b.Unlink() // b's catalog forgot the instance
	if a.InFlight() != 2 {
		t.Errorf("in flight through a %d, want 2", a.InFlight())
	}
}

// Each Activity counts its times from when it was made: linked to a shared
// Activity made later (a connection opened since), or earlier, the last
// request time it had is the shared one's, to the nanosecond; no request
// yet is no time.
func TestStandby_Activity_linked_across_origins(t *testing.T) {
	a := catalog.NewActivity()
	t0 := time.Now().Add(-time.Minute) // a request before either was made
	a.Touch(t0)
	later := catalog.NewActivity()
	a.Link(later)
	if got := later.Last(); !got.Equal(t0) || got.Round(0) == got {
		t.Errorf("shared made later: last %v, want %v on the monotonic clock", got, t0)
	}
	earlier := catalog.NewActivity()
	t1 := time.Now().Add(time.Hour)
	b, b2 := catalog.NewActivity(), catalog.NewActivity()
	b.Touch(t1)
	b2.Link(earlier) // no request yet: still none
	if !earlier.Last().IsZero() {
		t.Errorf("no request yet: last %v", earlier.Last())
	}
	b.Link(earlier)
	if !earlier.Last().Equal(t1) || !b2.Last().Equal(t1) {
		t.Errorf("last %v (through b2 %v), want %v", earlier.Last(), b2.Last(), t1)
	}
	if b.Touch(t0); !earlier.Last().Equal(t0) {
		t.Errorf("a request through b: last %v, want %v", earlier.Last(), t0)
	}
}

// An Activity just linked to has learnt no counter itself: the next
// request through it learns one (once), whatever its age, though a linked
// Activity knows the dial address.
func TestStandby_Activity_linked_learns_once(t *testing.T) {
	a, shared := catalog.NewActivity(), catalog.NewActivity()
	const dial = "10.0.0.9:8080"
	now := time.Now()
	if !a.Learning(dial, now) {
		t.Fatal("first request: not learning")
	}
	a.Begin().Learn(dial, new(counter))
	a.Link(shared)
	if !a.Learning(dial, now) || a.Learning(dial, now) {
		t.Error("after the link: want one request learning")
	}
}

// Issue 18: the last request time is kept on the monotonic clock, so a
// step of the wall clock (NTP, a VM resumed) does not make an instance
// look idle: Last carries a monotonic reading, and the idle time measured
// from it is the monotonic one.
func TestStandby_Activity_monotonic(t *testing.T) {
	a := catalog.NewActivity()
	now := time.Now()
	a.Touch(now)
	last := a.Last()
	if last.Round(0) == last {
		t.Fatalf("Last %v has no monotonic clock reading: idle time would follow wall clock steps", last)
	}
	// A wall clock step of an hour: a time read after it, without a
	// monotonic reading (as time.Unix gives), is an hour later on the wall;
	// with its monotonic reading (as time.Now gives), the idle time stays
	// that of the monotonic clock.
	later := now.Add(10 * time.Millisecond)
	if idle := later.Sub(last); idle != 10*time.Millisecond {
		t.Errorf("idle %s, want 10ms", idle)
	}
}

// A bad caddy.standby_after or caddy.standby is said once per value.
func TestStandby_bad_label_logged(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	c := catalog.New(catalog.Options{Logger: zap.New(core)})
	c.Put(inst("a", sleeps("-1s")))
	c.Put(inst("a", sleeps("-1s"), addr("10.0.0.3")))
	c.Put(inst("a", sleeps("1m"), label(catalog.LabelStandby, "nap")))
	got := logs.FilterMessageSnippet("never put on standby").All()
	if len(got) != 2 {
		t.Fatalf("%d warnings, want 2 (one per bad value): %v", len(got), got)
	}
}
