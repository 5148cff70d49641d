package swarm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/swarm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// testClock is a clock the test steps.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// scaled is a Scaler over a real catalog that follows a fake swarm.
type scaled struct {
	f       *fakeSwarm
	cat     *catalog.Catalog
	s       *Scaler
	clock   *testClock
	logs    *observer.ObservedLogs
	looks   atomic.Int64 // looks at a service ended
	samples atomic.Int64
	grew    atomic.Int64
}

// startScaled follows f into a catalog and starts its Scaler.
func startScaled(t *testing.T, f *fakeSwarm) *scaled {
	t.Helper()
	return startScaledBook(t, f, nil)
}

// startScaledBook is startScaled with book as the Scaler's LoadBook.
func startScaledBook(t *testing.T, f *fakeSwarm, book *LoadBook) *scaled {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	sc := &scaled{f: f, cat: catalog.New(catalog.Options{Logger: log}), clock: &testClock{now: time.Now()}, logs: logs}
	a := f.adapter(Config{Resync: time.Hour, NodeProbe: -1})
	s, err := a.Scaler(sc.cat, log, ScaleOptions{Grew: func() { sc.grew.Add(1) }, Sample: 5 * time.Millisecond, Clock: sc.clock.Now, Book: book,
		afterLook: func() { sc.looks.Add(1) }, afterSample: func() { sc.samples.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	sc.s = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Loop().Run(ctx, sc.cat, log) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	select {
	case <-sc.cat.Ready():
	case <-time.After(wait):
		t.Fatal("not listed")
	}
	return sc
}

// pool sets up service web at replicas, its tasks running, labelled
// with labels and the host web.test on port 8080.
func pool(f *fakeSwarm, replicas int, labels map[string]string) {
	l := map[string]string{catalog.LabelHost: "web.test", catalog.LabelPort: "8080"}
	for k, v := range labels {
		l[k] = v
	}
	f.update(func() {
		f.services["web"] = replicated("web", "web", uint64(replicas), l)
		for i := 1; i <= replicas; i++ {
			tk := task("web", i, "n2", running, running)
			f.tasks[tk.ID] = tk
		}
	})
}

// replicasOf is the fake's replica count of web.
func (sc *scaled) replicas() int {
	sc.f.mu.Lock()
	defer sc.f.mu.Unlock()
	return int(*sc.f.services["web"].Spec.Mode.Replicated.Replicas)
}

// targets are the route's routable targets for web.test, n of them.
func (sc *scaled) targets(t *testing.T, n int) []catalog.Target {
	t.Helper()
	var ts []catalog.Target
	testkit.Eventually(t, wait, "the route's targets", func() bool {
		ts = sc.cat.Snapshot().Targets(nil, catalog.Route{}, "web.test")
		return len(ts) == n
	})
	return ts
}

// load puts n requests in flight to each target; the returned func ends
// them.
func load(ts []catalog.Target, n int) (end func()) {
	var roots []*catalog.Activity
	for _, t := range ts {
		for range n {
			roots = append(roots, t.Activity.Begin())
		}
	}
	return func() {
		for _, r := range roots {
			r.Learn("x", nil)
		}
	}
}

// growOnce calls Grow once past the growth cadence and waits for the look
// it starts to end.
func (sc *scaled) growOnce(t *testing.T, ts []catalog.Target) {
	t.Helper()
	sc.clock.Add(time.Second)
	before := sc.looks.Load()
	sc.s.Grow(ts)
	testkit.Eventually(t, wait, "a look at the service", func() bool { return sc.looks.Load() > before })
}

// looking reports a look at web under way.
func (sc *scaled) looking() bool {
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	st := sc.s.states["web"]
	return st != nil && st.busy
}

// sync re-lists web as a service event would.
func (sc *scaled) sync() { sc.f.events <- serviceEvent("web", "update") }

// addTask adds task slot of web, running, and re-lists web.
func (sc *scaled) addTask(slot int) {
	sc.f.update(func() {
		tk := task("web", slot, "n2", running, running)
		sc.f.tasks[tk.ID] = tk
	})
	sc.sync()
}

func (sc *scaled) warnings() []string {
	var out []string
	for _, e := range sc.logs.FilterLevelExact(zapcore.WarnLevel).All() {
		out = append(out, e.Message)
	}
	return out
}

var growing = map[string]string{catalog.LabelSoftLimit: "2", catalog.LabelMaxReplicas: "3", catalog.LabelStandbyAfter: "2s"}

// growingPool is the pool most tests start from: the service web, 1
// replica, labelled growing, under a Scaler, and the route's 1 target.
func growingPool(t *testing.T) (*fakeSwarm, *scaled, []catalog.Target) {
	t.Helper()
	f := newFakeSwarm()
	pool(f, 1, growing)
	sc := startScaled(t, f)
	return f, sc, sc.targets(t, 1)
}

// Every routable task past its soft limit: one replica more, at the
// version inspected; a load at the limit grows nothing.
func TestScale_R5j_grows_by_one_on_load(t *testing.T) {
	f, sc, ts := growingPool(t)
	end := load(ts, 2) // at the limit, not past it
	sc.s.Grow(ts)
	end()
	end = load(ts, 3)
	defer end()
	sc.growOnce(t, ts)
	if got := sc.replicas(); got != 2 {
		t.Fatalf("replicas %d, want 2", got)
	}
	if n, g := f.Calls("ServiceUpdate"), sc.grew.Load(); n != 1 || g != 1 {
		t.Fatalf("%d updates, %d growths counted; want 1, 1", n, g)
	}
	if w := sc.warnings(); len(w) != 0 {
		t.Fatalf("warnings: %q", w)
	}
}

// One at a time: no replica more while the one added has no running
// task, nor while a task is not routable yet (the route sees fewer
// targets than replicas); never beyond caddy.max_replicas.
func TestScale_R5j_one_at_a_time_and_not_beyond_max(t *testing.T) {
	f, sc, ts := growingPool(t)
	defer load(ts, 3)()
	sc.growOnce(t, ts)
	sc.growOnce(t, ts) // the second task is not there yet: converging
	if got := sc.replicas(); got != 2 {
		t.Fatalf("replicas %d while the new task was missing, want 2", got)
	}
	sc.addTask(2)
	ts2 := sc.targets(t, 2)
	defer load(ts2[1:], 3)()
	sc.growOnce(t, ts2[:1]) // the route routes to one of the two: not ready
	if got := sc.replicas(); got != 2 {
		t.Fatalf("replicas %d while a task was not routable, want 2", got)
	}
	f.update(func() {
		s := f.services["web"]
		s.UpdateStatus = &swarm.UpdateStatus{State: swarm.UpdateStateUpdating}
		f.services["web"] = s
	})
	sc.growOnce(t, ts2) // a rolling update under way: converging
	if got := sc.replicas(); got != 2 {
		t.Fatalf("replicas %d during an update, want 2", got)
	}
	f.update(func() {
		s := f.services["web"]
		s.UpdateStatus = nil
		f.services["web"] = s
	})
	sc.growOnce(t, ts2)
	if got := sc.replicas(); got != 3 {
		t.Fatalf("replicas %d, want 3", got)
	}
	sc.addTask(3)
	ts3 := sc.targets(t, 3)
	defer load(ts3[2:], 3)()
	testkit.Eventually(t, wait, "the index at 3", func() bool { return sc.s.index.scaledServices(nil)[0].replicas == 3 })
	sc.clock.Add(time.Second)
	looks := sc.looks.Load()
	sc.s.Grow(ts3) // at its max: not even inspected
	if sc.looking() || sc.looks.Load() != looks {
		t.Fatal("a service at caddy.max_replicas looked at again")
	}
	if got, n := sc.replicas(), f.Calls("ServiceUpdate"); got != 3 || n != 2 {
		t.Fatalf("replicas %d after %d updates, want 3 (caddy.max_replicas) after 2", got, n)
	}
}

// Another Caddy adding the replica between this one's inspect and write:
// Swarm refuses the stale version, the replica is added once, and the
// refusal is no warning.
func TestScale_R5j_stale_version_refused(t *testing.T) {
	f, sc, ts := growingPool(t)
	defer load(ts, 3)()
	f.update(func() {
		f.beforeUpdate = func() { // under f.mu
			s := f.services["web"]
			two := uint64(2)
			s.Spec.Mode.Replicated = &swarm.ReplicatedService{Replicas: &two}
			s.Version.Index++
			f.services["web"] = s
			f.beforeUpdate = nil
		}
	})
	sc.growOnce(t, ts)
	if got, refused := sc.replicas(), f.Calls("ServiceUpdate refused"); got != 2 || refused != 1 {
		t.Fatalf("replicas %d, %d refused; want 2 (the other's), 1", got, refused)
	}
	if n, g := f.Calls("ServiceUpdate"), sc.grew.Load(); n != 0 || g != 0 {
		t.Fatalf("%d updates taken, %d growths counted; want 0, 0", n, g)
	}
	if w := sc.warnings(); len(w) != 0 {
		t.Fatalf("warnings: %q", w)
	}
}

// samples waits for n more load samples.
func (sc *scaled) waitSamples(t *testing.T, n int64) {
	t.Helper()
	from := sc.samples.Load()
	testkit.Eventually(t, wait, "load samples", func() bool { return sc.samples.Load() >= from+n })
}

// A load that would not fit in one replica fewer keeps them; once it
// has fitted for caddy.standby_after, one replica less, and again, never
// below caddy.min_replicas.
func TestScale_R5j_shrinks_after_idle_not_below_floor(t *testing.T) {
	f := newFakeSwarm()
	labels := map[string]string{catalog.LabelSoftLimit: "2", catalog.LabelMaxReplicas: "4",
		catalog.LabelMinReplicas: "2", catalog.LabelStandbyAfter: "2s"}
	pool(f, 4, labels)
	sc := startScaled(t, f)
	ts := sc.targets(t, 4)
	end := load(ts, 2) // 8 in flight: 3 replicas of 2 would not hold them
	sc.waitSamples(t, 2)
	sc.clock.Add(5 * time.Second)
	sc.waitSamples(t, 2)
	if n := f.Calls("ServiceUpdate"); n != 0 {
		t.Fatalf("%d updates under a load that needs 4 replicas", n)
	}
	end()
	sc.waitSamples(t, 2) // the fit starts
	sc.clock.Add(1900 * time.Millisecond)
	sc.waitSamples(t, 2)
	if n := f.Calls("ServiceUpdate"); n != 0 {
		t.Fatalf("%d updates before caddy.standby_after", n)
	}
	sc.clock.Add(200 * time.Millisecond)
	testkit.Eventually(t, wait, "3 replicas", func() bool { return sc.replicas() == 3 })
	f.update(func() { delete(f.tasks, "web-t4") })
	sc.sync()
	sc.targets(t, 3)
	testkit.Eventually(t, wait, "the index at 3", func() bool {
		svcs := sc.s.index.scaledServices(nil)
		return len(svcs) == 1 && svcs[0].replicas == 3
	})
	sc.waitSamples(t, 2)
	sc.clock.Add(2100 * time.Millisecond)
	testkit.Eventually(t, wait, "2 replicas", func() bool { return sc.replicas() == 2 })
	f.update(func() { delete(f.tasks, "web-t3") })
	sc.sync()
	sc.targets(t, 2)
	testkit.Eventually(t, wait, "the index at 2", func() bool { return sc.s.index.scaledServices(nil)[0].replicas == 2 })
	for range 3 {
		sc.waitSamples(t, 2)
		sc.clock.Add(time.Hour)
	}
	sc.waitSamples(t, 2)
	if got, n := sc.replicas(), f.Calls("ServiceUpdate"); got != 2 || n != 2 {
		t.Fatalf("replicas %d after %d updates, want 2 (caddy.min_replicas) after 2", got, n)
	}
}

// Two routes of one Caddy that follow one swarm through connections of
// their own (one reads caddy-docker-proxy's labels, say): a request counts
// in the catalog of its route only, yet the Scaler of the route that sends
// the service nothing does not take away a replica the other route's load
// needs; once that load ends, one replica less after
// caddy.standby_after, as with one connection (R5j, LoadBook).
func TestScale_R5j_connections_to_one_swarm_share_their_load(t *testing.T) {
	f := newFakeSwarm()
	labels := map[string]string{catalog.LabelSoftLimit: "2", catalog.LabelMaxReplicas: "2", catalog.LabelStandbyAfter: "2s"}
	pool(f, 2, labels)
	book := NewLoadBook()
	busy, idle := startScaledBook(t, f, book), startScaledBook(t, f, book)
	ts := busy.targets(t, 2)
	idle.targets(t, 2)
	end := load(ts, 2) // 4 in flight through busy's route: 1 replica of 2 would not hold them
	both := func(d time.Duration) {
		busy.waitSamples(t, 2)
		idle.waitSamples(t, 2)
		busy.clock.Add(d)
		idle.clock.Add(d)
		busy.waitSamples(t, 2)
		idle.waitSamples(t, 2)
	}
	both(5 * time.Second)
	if n := f.Calls("ServiceUpdate"); n != 0 {
		t.Fatalf("%d updates (replicas now %d) under a load of 4 through the other connection that needs 2 replicas", n, busy.replicas())
	}
	end()
	both(2100 * time.Millisecond)
	testkit.Eventually(t, wait, "1 replica once the load ended", func() bool { return busy.replicas() == 1 })
}

// A closed Scaler's load leaves the book.
func TestLoadBook_R5j_a_closed_Scaler_leaves(t *testing.T) {
	book := NewLoadBook()
	a, b := &Scaler{}, &Scaler{}
	book.share(a, map[string]int{"s1": 3})
	got := map[string]int{"s1": 1}
	book.share(b, got)
	if got["s1"] != 4 {
		t.Fatalf("b sees %d on s1, want its 1 and a's 3", got["s1"])
	}
	book.leave(a)
	got = map[string]int{"s1": 1}
	book.share(b, got)
	if got["s1"] != 1 {
		t.Fatalf("b sees %d on s1 after a left, want its own 1", got["s1"])
	}
}

// A bad caddy.max_replicas or caddy.min_replicas is one warning naming
// the label and the service, not repeated at a re-listing; a service
// with a bad max_replicas is never scaled.
func TestScale_R5j_bad_labels_warned(t *testing.T) {
	f := newFakeSwarm()
	pool(f, 1, map[string]string{catalog.LabelSoftLimit: "2", catalog.LabelMaxReplicas: "101"})
	f.update(func() {
		f.services["api"] = replicated("api", "api", 1, map[string]string{catalog.LabelMaxReplicas: "3", catalog.LabelMinReplicas: "5"})
		f.services["db"] = replicated("db", "db", 1, map[string]string{catalog.LabelMaxReplicas: "two"})
	})
	sc := startScaled(t, f)
	sc.sync()
	testkit.Eventually(t, wait, "web re-listed", func() bool { return f.Calls("ServiceInspect web") >= 1 })
	ts := sc.targets(t, 1)
	defer load(ts, 3)()
	sc.s.Grow(ts)
	sc.waitSamples(t, 2)
	got := map[string]string{}
	for _, e := range sc.logs.FilterLevelExact(zapcore.WarnLevel).All() {
		svc := e.ContextMap()["service"].(string)
		if _, dup := got[svc]; dup {
			t.Errorf("warned twice about %s", svc)
		}
		got[svc] = e.Message
	}
	for svc, label := range map[string]string{"web": "caddy.max_replicas", "api": "caddy.min_replicas", "db": "caddy.max_replicas"} {
		if !strings.Contains(got[svc], "label "+label+" is not valid") {
			t.Errorf("%s: warned %q, want one naming %s", svc, got[svc], label)
		}
	}
	if n := f.Calls("ServiceUpdate"); n != 0 {
		t.Errorf("%d updates of a service with a bad caddy.max_replicas", n)
	}
}

// A write the Engine refuses (a socket proxy without POST
// /services/{id}/update) is one warning, not one per look under load.
func TestScale_R5j_refused_write_warned_once(t *testing.T) {
	f := newFakeSwarm()
	pool(f, 1, growing)
	f.updateErr = errors.New("Error response from daemon: 403 Forbidden")
	sc := startScaled(t, f)
	ts := sc.targets(t, 1)
	defer load(ts, 3)()
	for range 3 {
		sc.growOnce(t, ts)
	}
	if n := f.Calls("ServiceUpdate failed"); n != 3 {
		t.Fatalf("%d writes tried, want 3", n)
	}
	if w := sc.warnings(); len(w) != 1 || !strings.Contains(w[0], "POST /services/{id}/update") {
		t.Fatalf("warnings %q, want one naming the write", w)
	}
}

// A request still routed while the connection closes starts no look.
func TestScale_R5j_nothing_after_close(t *testing.T) {
	_, sc, ts := growingPool(t)
	defer load(ts, 3)()
	sc.s.Close()
	sc.clock.Add(time.Second)
	sc.s.Grow(ts)
	if sc.looking() || sc.looks.Load() != 0 {
		t.Fatal("a look started after Close")
	}
}

// With endpoint vip there is no Scaler: a VIP's load is no task's.
func TestScale_R5j_none_with_vip(t *testing.T) {
	a := newFakeSwarm().adapter(Config{Endpoint: EndpointVIP})
	s, err := a.Scaler(catalog.New(catalog.Options{}), zap.NewNop(), ScaleOptions{})
	if s != nil || err != nil {
		t.Fatalf("Scaler with vip: %v, %v", s, err)
	}
}
