package connectwake

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// vm is an instance serving host h on guest port 8080, published on host
// port 20000+n of 10.1.0.1 and woken from standby by a connection there
// (standby_after set), as Dicer reports one.
func vm(name string, n int, state catalog.State, labels map[string]string) catalog.Instance {
	l := map[string]string{catalog.LabelHost: "h", catalog.LabelPort: "8080"}
	for k, v := range labels {
		l[k] = v
	}
	return catalog.Instance{ID: "id-" + name, Name: name, State: state, Labels: l, WakeOnConnect: true,
		Networks: []catalog.Attachment{{Network: "default", Address: "10.0.0." + strconv.Itoa(n), Gateway: "10.1.0.1"}},
		Ports:    []catalog.PublishedPort{{HostPort: uint16(20000 + n), GuestPort: 8080, Protocol: catalog.TCP}}}
}

// growCase is a Grower over a catalog, with a clock the test moves and a
// Dial that records each address and blocks while hold is set.
type growCase struct {
	g     *Grower
	cat   *catalog.Catalog
	mu    sync.Mutex
	now   time.Time
	dials []string
	hold  chan struct{} // nil: dials return at once
	// counters are reverse_proxy's in-flight counts, by instance.
	counters map[string]*counter
}

func newGrowCase(t *testing.T, insts ...catalog.Instance) *growCase {
	t.Helper()
	c := &growCase{cat: catalog.New(catalog.Options{}), now: time.Unix(1e9, 0), counters: map[string]*counter{}}
	c.cat.Replace(insts)
	c.g = New(context.Background(), Options{
		Now: func() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now },
		Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c.mu.Lock()
			c.dials = append(c.dials, addr)
			hold := c.hold
			c.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil, errors.New("test: no connection")
		},
	})
	t.Cleanup(c.g.Close)
	return c
}

func (c *growCase) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *growCase) dialList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.dials)
}

// inFlight sets the requests in flight to each routable instance of host
// h, by name.
type inFlight map[string]int

// grow sends n requests for host at once through Grow, with the in-flight
// counts of load, and reports how many started a wake.
func (c *growCase) grow(t *testing.T, host string, n int, load inFlight) int {
	t.Helper()
	snap := c.cat.Snapshot()
	targets := snap.Targets(nil, catalog.Route{}, host)
	for _, tg := range targets {
		n := c.counters[tg.Instance]
		if n == nil {
			n = new(counter)
			c.counters[tg.Instance] = n
			tg.Activity.Begin().Learn(tg.Dial, n)
		}
		n.Store(int64(load[tg.Instance]))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.g.Grow(snap, catalog.Route{}, host, targets) {
				mu.Lock()
				started++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.g.wg.Wait() // the connections started
	return started
}

// counter is an in-flight count the test sets.
type counter struct{ atomic.Int64 }

func (c *counter) NumRequests() int { return int(c.Load()) }

type fixed int

func (f fixed) NumRequests() int { return int(f) }

// R5j on Dicer: while every routable instance has more requests in flight
// than its caddy.soft_limit, Grow connects to the published port of the
// next instance on standby in name order, once for a storm of loaded
// requests; none at or under the limit, none again within RedialAfter
// while the daemon still shows it on standby, none while it is on its way
// up; the next once the woken one is loaded too. An instance in
// maintenance, one the daemon does not wake (no standby_after) and one
// without a published port are skipped.
func TestConnectWake_R5j_grows_one_at_a_time(t *testing.T) {
	limit := map[string]string{catalog.LabelSoftLimit: "2"}
	byHand := vm("a-by-hand", 5, catalog.StateStandby, nil)
	byHand.WakeOnConnect = false
	unpublished := vm("a-unpublished", 6, catalog.StateStandby, nil)
	unpublished.Ports = nil
	c := newGrowCase(t,
		vm("a", 1, catalog.StateRunning, limit),
		vm("a-maint", 4, catalog.StateStandby, map[string]string{catalog.LabelMaintenance: "upgrading"}),
		byHand, unpublished,
		vm("b", 2, catalog.StateStandby, limit),
		vm("c", 3, catalog.StateStandby, limit))

	if n := c.grow(t, "h", 20, inFlight{"a": 2}); n != 0 || len(c.dialList()) != 0 {
		t.Fatalf("at the soft limit: %d wakes, dials %v; want none", n, c.dialList())
	}
	if n := c.grow(t, "h", 50, inFlight{"a": 3}); n != 1 {
		t.Fatalf("50 loaded requests started %d wakes, want 1", n)
	}
	if d := c.dialList(); !slices.Equal(d, []string{"10.1.0.1:20002"}) {
		t.Fatalf("dials %v, want one to b's published port", d)
	}
	c.advance(RedialAfter - time.Millisecond)
	if n := c.grow(t, "h", 50, inFlight{"a": 3}); n != 0 {
		t.Fatalf("b still on standby within RedialAfter: %d more wakes, want none", n)
	}
	if !c.g.Waking("id-b") || c.g.Waking("id-c") {
		t.Errorf("Waking: b %v, c %v; want true, false", c.g.Waking("id-b"), c.g.Waking("id-c"))
	}
	c.advance(time.Millisecond)
	if n := c.grow(t, "h", 50, inFlight{"a": 3}); n != 1 || len(c.dialList()) != 2 || c.dialList()[1] != "10.1.0.1:20002" {
		t.Fatalf("after RedialAfter with b still on standby: %d wakes, dials %v; want b connected to again", n, c.dialList())
	}

	for _, s := range []catalog.State{catalog.StateStarting, catalog.StateRunning} {
		b := vm("b", 2, s, limit)
		if s == catalog.StateRunning {
			b.Health = catalog.HealthStarting // up, not ready yet
		}
		c.cat.Put(b)
		c.advance(RedialAfter)
		if n := c.grow(t, "h", 20, inFlight{"a": 3}); n != 0 {
			t.Fatalf("b %s: %d wakes, want none while it is on its way up", s, n)
		}
	}
	c.cat.Put(vm("b", 2, catalog.StateRunning, limit)) // ready
	if n := c.grow(t, "h", 20, inFlight{"a": 3, "b": 1}); n != 0 {
		t.Fatalf("b under its limit: %d wakes, want none", n)
	}
	if n := c.grow(t, "h", 20, inFlight{"a": 3, "b": 3}); n != 1 {
		t.Fatalf("a and b loaded: %d wakes, want 1", n)
	}
	if d := c.dialList(); len(d) != 3 || d[2] != "10.1.0.1:20003" {
		t.Fatalf("dials %v, want c's published port last", d)
	}
}

// A target without caddy.soft_limit keeps its pool from growing, however
// loaded the others are.
func TestConnectWake_R5j_every_target_needs_a_soft_limit(t *testing.T) {
	c := newGrowCase(t,
		vm("a", 1, catalog.StateRunning, map[string]string{catalog.LabelSoftLimit: "1"}),
		vm("a2", 2, catalog.StateRunning, nil),
		vm("b", 3, catalog.StateStandby, nil))
	for _, tg := range c.cat.Snapshot().Targets(nil, catalog.Route{}, "h") {
		if tg.Instance == "a2" && tg.Activity != nil {
			t.Fatalf("a2 has no soft limit, yet an Activity")
		}
	}
	snap := c.cat.Snapshot()
	targets := snap.Targets(nil, catalog.Route{}, "h")
	targets[0].Activity.Begin().Learn(targets[0].Dial, fixed(5))
	if c.g.Grow(snap, catalog.Route{}, "h", targets) || len(c.dialList()) != 0 {
		t.Fatalf("a wake with a2 unlimited: dials %v", c.dialList())
	}
}

// A Grower opens at most MaxDialing connections at once, whatever the
// number of loaded pools; the rest wait for a later request.
func TestConnectWake_R5j_bounded_connections_in_flight(t *testing.T) {
	var insts []catalog.Instance
	for i := range MaxDialing + 2 {
		host := "h" + strconv.Itoa(i)
		run := vm("run"+strconv.Itoa(i), 2*i+1, catalog.StateRunning, map[string]string{catalog.LabelHost: host, catalog.LabelSoftLimit: "1"})
		run.ID = "run-" + host
		sleep := vm("sleep"+strconv.Itoa(i), 2*i+2, catalog.StateStandby, map[string]string{catalog.LabelHost: host})
		insts = append(insts, run, sleep)
	}
	c := newGrowCase(t, insts...)
	c.hold = make(chan struct{})
	started := 0
	for i := range MaxDialing + 2 {
		host := "h" + strconv.Itoa(i)
		snap := c.cat.Snapshot()
		targets := snap.Targets(nil, catalog.Route{}, host)
		targets[0].Activity.Begin().Learn(targets[0].Dial, fixed(2))
		if c.g.Grow(snap, catalog.Route{}, host, targets) {
			started++
		}
	}
	if started != MaxDialing {
		t.Errorf("%d wakes started with every connection held, want %d", started, MaxDialing)
	}
	close(c.hold)
	c.g.wg.Wait()
	snap := c.cat.Snapshot()
	host := "h" + strconv.Itoa(MaxDialing)
	if !c.g.Grow(snap, catalog.Route{}, host, snap.Targets(nil, catalog.Route{}, host)) {
		t.Error("no wake once the connections were through")
	}
}
