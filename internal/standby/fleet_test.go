package standby

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// fleetCaddy is one Caddy of a test fleet: its own Engine state and
// catalog over one container, sharing storage with the others.
type fleetCaddy struct {
	w     *Waker
	cat   *catalog.Catalog
	logs  *observer.ObservedLogs
	fails atomic.Int32
}

func newFleetCaddy(t *testing.T, name string, storage fleet.Storage, f *fakeActions) *fleetCaddy {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	c := &fleetCaddy{cat: catalog.New(catalog.Options{}), logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	eng := NewEngine(f)
	c.w = Join(ctx, eng, c.cat, zap.New(core), Options{})
	fl := fleet.New(fleet.Self{ID: name, Host: name})
	fl.SetStorage(storage)
	eng.ShareThrough(fl, zap.New(core), func(string) { c.fails.Add(1) })
	t.Cleanup(func() { cancel(); c.w.Close(); _ = eng.Destruct() })
	in := sleeper(catalog.StateRunning)
	in.Labels[catalog.LabelStandbyAfter] = "1s"
	c.cat.Replace([]catalog.Instance{in})
	return c
}

// request routes a request through c to the container; end ends it.
func (c *fleetCaddy) request(t *testing.T) (end func()) {
	t.Helper()
	ts := c.cat.Snapshot().Targets(nil, catalog.Route{Port: 8080}, "h")
	if len(ts) != 1 {
		t.Fatalf("targets %v", ts)
	}
	a := ts[0].Activity
	c.w.Routed(a, ts[0].Dial)
	busy := a.Begin()
	return func() { busy.Learn(ts[0].Dial, nil); a.Touch(time.Now()) }
}

// R5m: with two Caddys sharing a storage, the one that routed a single
// request long ago does not put the container on standby while the other
// has a request in flight to it (its lease holds it awake); once that
// request ends, the container goes on standby after standby_after.
func TestFleet_R5m_a_request_in_flight_elsewhere_keeps_the_container_up(t *testing.T) {
	storage := &fleet.Memory{}
	var stops atomic.Int32
	f := &fakeActions{then: func(action, _ string) error {
		if action == "stop" {
			stops.Add(1)
		}
		return nil
	}}
	a := newFleetCaddy(t, "caddy-a", storage, f)
	b := newFleetCaddy(t, "caddy-b", storage, f)
	b.request(t)() // B's last request, over at once
	end := a.request(t)
	// A's lease arrives within its publisher's second; B's idle time
	// (1 s) passes meanwhile and then three times over.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if stops.Load() != 0 {
			t.Fatal("put on standby while another Caddy of the fleet has a request in flight to it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	end()
	for deadline := time.Now().Add(10 * time.Second); stops.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("not put on standby once the fleet's last request ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a.fails.Load()+b.fails.Load() != 0 {
		t.Errorf("storage failures counted: %d", a.fails.Load()+b.fails.Load())
	}
}

// R5m: while the shared storage fails, nothing is put on standby, once
// said in the log and counted at each failure; once it works again, the
// idle container goes on standby.
func TestFleet_R5m_an_unreadable_storage_stops_nothing(t *testing.T) {
	storage := &fleet.Memory{}
	err := errors.New("storage down")
	storage.Fail.Store(&err)
	var stops atomic.Int32
	f := &fakeActions{then: func(action, _ string) error {
		if action == "stop" {
			stops.Add(1)
		}
		return nil
	}}
	b := newFleetCaddy(t, "caddy-b", storage, f)
	b.request(t)()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if stops.Load() != 0 {
			t.Fatal("put on standby while the fleet's storage could not be read")
		}
	}
	if b.fails.Load() < 2 {
		t.Errorf("%d failures counted, want each (at least 2)", b.fails.Load())
	}
	if n := b.logs.FilterMessageSnippet("fleet's storage cannot be used").Len(); n != 1 {
		t.Errorf("%d log lines about the storage, want 1", n)
	}
	storage.Fail.Store(nil)
	for deadline := time.Now().Add(5 * time.Second); stops.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not put on standby once the storage worked again")
		}
	}
	if b.logs.FilterMessageSnippet("works again").Len() != 1 {
		t.Error("no line saying the storage works again")
	}
}

// countingStorage counts the writes to a fleet.Memory.
type countingStorage struct {
	fleet.Memory
	stores atomic.Int32
}

func (c *countingStorage) Store(ctx context.Context, key string, value []byte) error {
	c.stores.Add(1)
	return c.Memory.Store(ctx, key, value)
}

// R5m, the cost: a container with a request in flight all along is
// leased at most once per fleet.LeaseEvery of its standby_after (1 s for
// 3 s), and one used once and then idle is leased once: the writes per
// minute per instance the docs give (60 and 1 for standby_after 3s; 6
// for 30s, 1 for 5m and longer).
func TestFleet_R5m_writes_per_minute(t *testing.T) {
	storage := &countingStorage{}
	f := &fakeActions{then: func(string, string) error { return nil }}
	busy := newFleetCaddy(t, "caddy-a", storage, f)
	busy.cat.Replace([]catalog.Instance{func() catalog.Instance {
		in := sleeper(catalog.StateRunning)
		in.Labels[catalog.LabelStandbyAfter] = "3s"
		return in
	}()})
	end := busy.request(t)
	const window = 4 * time.Second
	time.Sleep(window) // the publisher's writes over the window, counted
	end()
	n := int(storage.stores.Load())
	perMinute := float64(n) * float64(time.Minute) / float64(window)
	t.Logf("a container busy all along (standby_after 3s): %d lease writes in %s, %.0f a minute", n, window, perMinute)
	if max := int(window/fleet.LeaseEvery(3*time.Second)) + 1; n > max || n == 0 {
		t.Errorf("%d writes in %s, want 1 to %d", n, window, max)
	}
	idle := &countingStorage{}
	quiet := newFleetCaddy(t, "caddy-b", idle, f)
	quiet.cat.Replace([]catalog.Instance{func() catalog.Instance {
		in := sleeper(catalog.StateRunning)
		in.Labels[catalog.LabelStandbyAfter] = "1h" // not on standby during the count
		return in
	}()})
	quiet.request(t)()
	for deadline := time.Now().Add(5 * time.Second); idle.stores.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the used container was never leased")
		}
	}
	time.Sleep(2 * publishEvery) // two more looks: nothing new to say
	if n := idle.stores.Load(); n != 1 {
		t.Errorf("a container used once: %d writes, want 1", n)
	}
}

// R5j across a fleet: two Caddys each with one request in flight to a
// pool's only running instance (caddy.soft_limit 1): neither alone is past
// the limit, the fleet is; once B has read A's lease, B's next request
// grows the pool. Apart (no shared storage), it does not.
func TestFleet_R5j_the_pool_grows_on_the_fleets_load(t *testing.T) {
	for _, shared := range []bool{true, false} {
		labels := map[string]string{catalog.LabelHost: "h", catalog.LabelSoftLimit: "1", catalog.LabelStandbyAfter: "1h"}
		insts := []catalog.Instance{member("a", catalog.StateRunning, labels), member("b", catalog.StateStopped, labels)}
		storage := &fleet.Memory{}
		var ps []*poolCase
		for _, name := range []string{"caddy-a", "caddy-b"} {
			p := newPoolCase(t, insts...)
			fl := fleet.New(fleet.Self{ID: name})
			fl.SetStorage(storage)
			if !shared {
				fl.SetStorage(&fleet.Memory{})
			}
			p.w.Engine().ShareThrough(fl, zap.NewNop(), nil)
			t.Cleanup(p.w.Engine().stopFleet)
			ps = append(ps, p)
		}
		route := catalog.Route{Port: 8080}
		var actB *catalog.Activity
		for _, p := range ps { // one request in flight through each Caddy
			ts := p.cat.Snapshot().Targets(nil, route, "h")
			if len(ts) != 1 {
				t.Fatalf("targets %v", ts)
			}
			p.w.Routed(ts[0].Activity, ts[0].Dial)
			inFlight := new(hostCount)
			inFlight.n.Store(1)
			ts[0].Activity.Begin().Learn(ts[0].Dial, inFlight)
			actB = ts[0].Activity
		}
		b := ps[1]
		if !shared {
			time.Sleep(3 * publishEvery) // the leases it would read by then
			if n := actB.Load(); n != 1 {
				t.Fatalf("apart: B's load %d, want its own 1", n)
			}
			snap := b.cat.Snapshot()
			b.w.Grow(snap, route, "h", snap.Targets(nil, route, "h"))
			if c := b.callList(); len(c) != 0 {
				t.Errorf("apart: calls %v, want none (B alone is at its soft limit)", c)
			}
			continue
		}
		testkit.Eventually(t, 3*time.Second, "B reads A's load", func() bool { return actB.Load() == 2 })
		snap := b.cat.Snapshot()
		b.w.Grow(snap, route, "h", snap.Targets(nil, route, "h"))
		testkit.Eventually(t, 3*time.Second, "B grows the pool", func() bool {
			return slices.Equal(b.callList(), []string{"start id-b"})
		})
	}
}
