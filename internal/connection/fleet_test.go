package connection

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// fleetConn is a connection of one Caddy of a test fleet to the daemon
// "docker unix:///d.sock", whose catalog holds web-1 and web-2.
func fleetConn(t *testing.T, name string, storage fleet.Storage) *Conn {
	t.Helper()
	return fleetConnAt(t, name, storage, nil)
}

// fleetConnAt is fleetConn whose switches see the time on clock (nil: the
// real one).
func fleetConnAt(t *testing.T, name string, storage fleet.Storage, clock *fakeClock) *Conn {
	t.Helper()
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{
		{ID: "id-1", Name: "web-1", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
		{ID: "id-2", Name: "web-2", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
	})
	c := Fixture{Kind: "docker", Address: "unix:///d.sock", Catalog: cat}.Conn()
	t.Cleanup(func() { c.cancel() })
	if clock != nil {
		c.switches.now = clock.now
	}
	c.ShareThrough(storage, fleet.Self{ID: name + "-id", Host: name})
	return c
}

// fakeClock is a clock a test moves.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// weightOf is the runtime weight of instance id in c's catalog (-1: none).
func weightOf(c *Conn, id string) int {
	for _, st := range c.Catalog().Instances(nil) {
		if st.ID == id {
			if !st.RuntimeWeight {
				return -1
			}
			return st.Weight
		}
	}
	return -2
}

func byName(name string) func(map[string]string, string) bool {
	return func(_ map[string]string, n string) bool { return n == name }
}

// R4e: a weight set through one Caddy of a fleet holds on the others
// within a second (switchesEvery), on one that starts later too, and one
// clear through any of them clears it everywhere; the admin API says
// where it came from.
func TestFleet_R4e_weights_belong_to_the_fleet(t *testing.T) {
	storage := &fleet.Memory{}
	a, b := fleetConn(t, "caddy-a", storage), fleetConn(t, "caddy-b", storage)
	if _, _, err := a.SetWeight(byName("web-2"), 0); err != nil {
		t.Fatal(err)
	}
	if weightOf(a, "id-2") != 0 {
		t.Fatalf("A's own weight: %d", weightOf(a, "id-2"))
	}
	testkit.Eventually(t, 1500*time.Millisecond, "B has A's weight", func() bool { return weightOf(b, "id-2") == 0 })
	if got := b.SwitchOrigin("id-2"); got != "caddy-a (caddy-a-id)" {
		t.Errorf("B says the weight came from %q", got)
	}
	late := fleetConn(t, "caddy-c", storage) // restarted: a new process
	testkit.Eventually(t, 1500*time.Millisecond, "a Caddy that starts later has the weight", func() bool { return weightOf(late, "id-2") == 0 })
	if _, _, err := b.SetWeight(byName("web-2"), -1); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 1500*time.Millisecond, "A and C follow B's clear", func() bool {
		return weightOf(a, "id-2") == -1 && weightOf(late, "id-2") == -1
	})
	if weightOf(a, "id-1") != -1 {
		t.Error("web-1 got a weight")
	}
}

// R4e: a maintenance switch set through one Caddy holds on the others,
// and goes off everywhere by one clear.
func TestFleet_R4e_maintenance_belongs_to_the_fleet(t *testing.T) {
	storage := &fleet.Memory{}
	a, b := fleetConn(t, "caddy-a", storage), fleetConn(t, "caddy-b", storage)
	sel, _ := selector.Parse("app=web")
	if _, ok, err := a.SetMaintenance(sel, "back soon", true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	testkit.Eventually(t, 1500*time.Millisecond, "B has the switch", func() bool {
		sw := b.Catalog().MaintenanceSwitches()
		return len(sw) == 1 && sw[0].Message == "back soon"
	})
	if got := b.MaintenanceOrigin("app=web"); got != "caddy-a (caddy-a-id)" {
		t.Errorf("B says the switch came from %q", got)
	}
	if _, _, err := b.SetMaintenance(sel, "", false); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 1500*time.Millisecond, "A's switch off", func() bool { return len(a.Catalog().MaintenanceSwitches()) == 0 })
}

// R4e: a switch the fleet's storage cannot take changes nothing, and says
// why; the last switches read stay in force while reads fail.
func TestFleet_R4e_storage_down(t *testing.T) {
	storage := &fleet.Memory{}
	a := fleetConn(t, "caddy-a", storage)
	if _, _, err := a.SetWeight(byName("web-1"), 3); err != nil {
		t.Fatal(err)
	}
	down := errors.New("down")
	storage.Fail.Store(&down)
	if _, _, err := a.SetWeight(byName("web-2"), 0); !errors.Is(err, ErrFleetStorage) {
		t.Fatalf("SetWeight with the storage down: %v", err)
	}
	time.Sleep(2 * switchesEvery) // reads fail meanwhile
	if weightOf(a, "id-2") != -1 || weightOf(a, "id-1") != 3 {
		t.Errorf("weights %d and %d, want web-2 unchanged and web-1's 3 kept", weightOf(a, "id-2"), weightOf(a, "id-1"))
	}
}

// A Swarm route with endpoint vip has no scaler (the load of a VIP is no
// task's): the connection's Scaling is none, and a loaded route grows
// nothing rather than call a missing scaler.
func TestScaling_replicas_without_a_scaler_is_none(t *testing.T) {
	c, err := New(Spec{Kind: "swarm", Address: "unix:///s.sock",
		Run:     func(ctx context.Context, _ catalog.Sink) { <-ctx.Done() },
		Scaling: Replicas(func(*catalog.Catalog, func()) (*swarm.Scaler, error) { return nil, nil })})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destruct()
	act := catalog.NewActivity()
	ts := []catalog.Target{{Dial: "10.0.0.2:80", Instance: "web.1", SoftLimit: 1, Activity: act}}
	c.Grow(c.Catalog().Snapshot(), catalog.Route{}, "h", ts) // no panic
	if c.Routed(act, "10.0.0.2:80") || c.WakesOnRequest() {
		t.Error("a connection without a scaler counts or wakes")
	}
	c.ShareThrough(&fleet.Memory{}, fleet.Self{ID: "me"})
}

// R5j in a fleet, on a daemon that wakes on connect (Dicer): two Caddys
// with one request in flight each to a pool instance (caddy.soft_limit 1):
// each sees the fleet's load, 2, past the limit, within two seconds.
func TestFleet_R5j_a_dicer_pool_sees_the_fleets_load(t *testing.T) {
	storage := &fleet.Memory{}
	acts := make([]*catalog.Activity, 0, 2)
	for _, name := range []string{"caddy-a", "caddy-b"} {
		cat := catalog.New(catalog.Options{})
		cat.Replace([]catalog.Instance{{ID: "vm-1", Name: "web-1", State: catalog.StateRunning,
			Labels:   map[string]string{catalog.LabelHost: "h", catalog.LabelSoftLimit: "1", catalog.LabelPort: "8080"},
			Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.2"}}}})
		g := connectwake.New(context.Background(), connectwake.Options{})
		t.Cleanup(g.Close)
		c := Fixture{Kind: "dicer", Address: "unix:///d.sock", Catalog: cat, Grower: g}.Conn()
		t.Cleanup(func() { c.cancel() })
		c.ShareThrough(storage, fleet.Self{ID: name})
		ts := cat.Snapshot().Targets(nil, catalog.Route{Port: 8080}, "h")
		if len(ts) != 1 || ts[0].Activity == nil {
			t.Fatalf("targets %v", ts)
		}
		one := inFlight(1)
		ts[0].Activity.Begin().Learn(ts[0].Dial, &one)
		acts = append(acts, ts[0].Activity)
	}
	testkit.Eventually(t, 3*time.Second, "both see the fleet's load", func() bool {
		return acts[0].Load() == 2 && acts[1].Load() == 2 && acts[0].InFlight() == 1
	})
}

// inFlight is a fixed in-flight counter.
type inFlight int

func (n *inFlight) NumRequests() int { return int(*n) }

// R5m, R15: the sweep of the lease folders comes again in a second after
// one that found garbage, and only every sweepEvery after one that found
// none: its storage calls follow the garbage.
func TestFleet_R5m_sweep_pace_follows_the_garbage(t *testing.T) {
	for _, c := range []struct {
		garbage int
		want    time.Duration
	}{{fleet.SweepFolders, time.Second}, {1, time.Second}, {0, sweepEvery}} {
		if got := sweepPace(c.garbage, nil); got != c.want {
			t.Errorf("after a sweep that found %d: next in %v, want %v", c.garbage, got, c.want)
		}
	}
}
