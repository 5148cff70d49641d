package standby

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
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
