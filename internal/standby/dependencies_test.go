package standby

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// member is a container of a pool serving host h: labels, on network n,
// with an address once running.
func member(name string, state catalog.State, labels map[string]string) catalog.Instance {
	in := catalog.Instance{ID: "id-" + name, Name: name, State: state, Labels: labels,
		Networks: []catalog.Attachment{{Network: "n"}}}
	if state == catalog.StateRunning {
		in.Networks[0].Address = "10.0.0." + string(rune('2'+len(name)%8))
	}
	return in
}

// poolCase is a Waker over a catalog whose fake Engine brings a started
// container up (running) 20 ms after the call, and a stopped one down at
// once; calls are recorded in order.
type poolCase struct {
	w      *Waker
	cat    *catalog.Catalog
	logs   *observer.ObservedLogs
	mu     sync.Mutex
	calls  []string // "start id", "stop id"
	insts  map[string]catalog.Instance
	causes sync.Map // WakeCause -> *atomic.Int32
	// starting are the start calls made whose instance is not running
	// yet, mostStarting the most at once (under mu).
	starting, mostStarting int
}

func newPoolCase(t *testing.T, insts ...catalog.Instance) *poolCase {
	t.Helper()
	return newPoolCaseWith(t, Options{}, catalog.Options{}, insts...)
}

// newPoolCaseWith is newPoolCase with the connection's and catalog's
// settings; the starts in flight (called, not yet running) are counted,
// the most at once kept.
func newPoolCaseWith(t *testing.T, opts Options, catOpts catalog.Options, insts ...catalog.Instance) *poolCase {
	t.Helper()
	p := &poolCase{insts: map[string]catalog.Instance{}}
	f := &fakeActions{}
	core, logs := observer.New(zapcore.InfoLevel)
	p.logs = logs
	p.cat = catalog.New(catOpts)
	f.then = func(action, id string) error {
		p.mu.Lock()
		p.calls = append(p.calls, action+" "+id)
		in := p.insts[id]
		if action == "start" {
			p.starting++
			p.mostStarting = max(p.mostStarting, p.starting)
		}
		p.mu.Unlock()
		switch action {
		case "start":
			go func() {
				time.Sleep(20 * time.Millisecond) // the Engine's event comes later
				p.mu.Lock()
				p.starting--
				p.mu.Unlock()
				p.put(member(in.Name, catalog.StateRunning, in.Labels))
			}()
		case "stop":
			p.put(member(in.Name, catalog.StateStopped, in.Labels))
		}
		return nil
	}
	for _, in := range insts {
		p.insts[in.ID] = in
	}
	p.cat.Replace(insts)
	ctx, cancel := context.WithCancel(context.Background())
	opts.Started = func(c WakeCause) {
		n, _ := p.causes.LoadOrStore(c, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	p.w = New(ctx, f, p.cat, zap.New(core), opts)
	t.Cleanup(func() { cancel(); p.w.Close() })
	return p
}

func (p *poolCase) put(in catalog.Instance) {
	p.mu.Lock()
	p.insts[in.ID] = in
	p.mu.Unlock()
	p.cat.Put(in)
}

func (p *poolCase) callList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

func (p *poolCase) started(c WakeCause) int {
	if n, ok := p.causes.Load(c); ok {
		return int(n.(*atomic.Int32).Load())
	}
	return 0
}

// R5j: while every routable instance has more requests in flight than its
// caddy.soft_limit, Grow wakes the next on standby in name order, one at a
// time: many loaded requests at once make one start; none while one is
// below its limit; the next once the new one is loaded too.
func TestStandby_R5j_soft_limit_grows_one_at_a_time(t *testing.T) {
	labels := map[string]string{catalog.LabelHost: "h", catalog.LabelStandbyAfter: "1h", catalog.LabelSoftLimit: "2"}
	p := newPoolCase(t,
		member("a", catalog.StateRunning, labels),
		member("b", catalog.StateStopped, labels),
		member("c", catalog.StateStopped, labels))
	route := catalog.Route{Port: 8080}
	load := map[string]*hostCount{}
	// grow sends n requests at once, each through Grow, with the in-flight
	// counts of load learnt.
	grow := func(n int) {
		snap := p.cat.Snapshot()
		ts := snap.Targets(nil, route, "h")
		for _, tg := range ts {
			if load[tg.Instance] == nil {
				load[tg.Instance] = new(hostCount)
				tg.Activity.Begin().Learn(tg.Dial, load[tg.Instance])
			}
		}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() { defer wg.Done(); p.w.Grow(snap, route, "h", ts) }()
		}
		wg.Wait()
	}
	routable := func(n int) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, "routable instances", func() bool {
			return len(p.cat.Snapshot().Targets(nil, route, "h")) == n
		})
	}

	grow(50) // a's in flight 0: no growth
	if c := p.callList(); len(c) != 0 {
		t.Fatalf("calls %v under the soft limit", c)
	}
	load["a"].n.Store(3)
	grow(50)
	routable(2)
	if c := p.callList(); !slices.Equal(c, []string{"start id-b"}) {
		t.Fatalf("calls %v, want one start of b (first by name)", c)
	}
	grow(50) // b has none in flight
	if c := p.callList(); len(c) != 1 {
		t.Fatalf("calls %v with b below its soft limit", c)
	}
	load["b"].n.Store(3)
	grow(50)
	routable(3)
	if c := p.callList(); !slices.Equal(c, []string{"start id-b", "start id-c"}) {
		t.Fatalf("calls %v, want b then c", c)
	}
	if n := p.started(CauseLoad); n != 2 {
		t.Errorf("%d wakes started for load, want 2", n)
	}
}

// R5k: waking app A starts the database it depends on first, and A only
// once the database is ready; both idle, A goes on standby first, and the
// database only once A is down.
func TestStandby_R5k_dependency_first_and_last(t *testing.T) {
	db := member("db", catalog.StateStopped, map[string]string{"role": "db", catalog.LabelStandbyAfter: "300ms"})
	app := member("app", catalog.StateStopped, map[string]string{catalog.LabelHost: "h",
		catalog.LabelStandbyAfter: "600ms", catalog.LabelDependsOn: "role=db"})
	p := newPoolCase(t, db, app)
	ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil)
	if len(ts) != 1 || ts[0].Instance != "app" {
		t.Fatalf("targets %v, want app", ts)
	}
	if c := p.callList(); !slices.Equal(c, []string{"start id-db", "start id-app"}) {
		t.Fatalf("calls %v, want db started before app", c)
	}
	if p.started(CauseDependency) != 1 || p.started(CauseRequest) != 1 {
		t.Errorf("wakes started: dependency %d, request %d; want 1 and 1", p.started(CauseDependency), p.started(CauseRequest))
	}
	// db's own standby_after passes first: it stays up while app runs.
	testkit.Eventually(t, 10*time.Second, "both on standby", func() bool { return len(p.callList()) == 4 })
	if c := p.callList(); !slices.Equal(c[2:], []string{"stop id-app", "stop id-db"}) {
		t.Fatalf("calls %v, want app stopped before db", c)
	}
}

// R5k: two instances depending on each other are a cycle: a clear warning
// naming both, and no wake loop: waking one wakes only it.
func TestStandby_R5k_cycle_warns_and_wakes_one(t *testing.T) {
	a := member("a", catalog.StateStopped, map[string]string{catalog.LabelHost: "h", "x": "a",
		catalog.LabelStandbyAfter: "1h", catalog.LabelDependsOn: "x=b"})
	b := member("b", catalog.StateStopped, map[string]string{"x": "b",
		catalog.LabelStandbyAfter: "1h", catalog.LabelDependsOn: "x=a"})
	p := newPoolCase(t, a, b)
	ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil)
	if len(ts) != 1 || ts[0].Instance != "a" {
		t.Fatalf("targets %v, want a", ts)
	}
	if c := p.callList(); !slices.Equal(c, []string{"start id-a"}) {
		t.Fatalf("calls %v, want a started alone", c)
	}
	warned := p.logs.FilterMessageSnippet("cycle").All()
	if len(warned) != 1 || warned[0].ContextMap()["instance"] != "a" || warned[0].ContextMap()["depends_on"] != "b" {
		t.Fatalf("cycle warnings %v, want one naming a and b", warned)
	}
}
