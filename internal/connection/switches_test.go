package connection

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// following marks c's daemon listed and followed, as its follow loop does:
// its catalog is synced (a Fixture has no loop).
func following(c *Conn) {
	c.status.update(func(s *Status) { s.setState(StateFollowing, time.Now()) })
}

// storeGone writes n weights of instances no catalog of the test holds
// ("old-00000" the oldest) into storage's record of the test daemon, as
// deploys long gone left them, through another Caddy.
func storeGone(t *testing.T, storage fleet.Storage, n int) {
	t.Helper()
	f := fleet.New(fleet.Self{ID: "old-caddy"})
	f.SetStorage(storage)
	at := time.Now().Add(-time.Duration(n+1) * time.Minute)
	if _, err := f.UpdateSwitches(context.Background(), "docker unix:///d.sock", func(sw *fleet.Switches) error {
		sw.Weights = make(map[string]fleet.WeightSwitch, n)
		for i := range n {
			sw.Weights[fmt.Sprintf("old-%05d", i)] = fleet.WeightSwitch{Weight: i % 2, Name: fmt.Sprintf("web-old-%d", i),
				From: "old-caddy", At: at.Add(time.Duration(i) * time.Minute)}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// record is the test daemon's switches record in storage, and its size.
func record(t *testing.T, storage fleet.Storage) (fleet.Switches, int) {
	t.Helper()
	f := fleet.New(fleet.Self{ID: "reader"})
	f.SetStorage(storage)
	sw, raw, err := f.LoadSwitches(context.Background(), "docker unix:///d.sock")
	if err != nil {
		t.Fatal(err)
	}
	return sw, len(raw)
}

// R4e: a record full of the weights of instances long gone (10,000, from
// 100 deploys of 100 containers) never blocks a new weight: the oldest of
// them make room at once, and a Caddy whose catalog is synced removes the
// rest once they have been missing for goneAfter; the record is then the
// live weights' size.
func TestFleet_R4e_gone_weights_make_room_and_are_pruned(t *testing.T) {
	storage := &fleet.Memory{}
	storeGone(t, storage, fleet.MaxWeightSwitches)
	clock := newFakeClock()
	a := fleetConnAt(t, "caddy-a", storage, clock)
	following(a)
	if _, _, err := a.SetWeight(byName("web-2"), 0); err != nil {
		t.Fatalf("a weight on a full record of gone instances: %v", err)
	}
	if weightOf(a, "id-2") != 0 {
		t.Fatalf("web-2's weight %d, want 0", weightOf(a, "id-2"))
	}
	sw, _ := record(t, storage)
	if _, oldest := sw.Weights["old-00000"]; oldest || len(sw.Weights) != fleet.MaxWeightSwitches || sw.Weights["id-2"].Weight != 0 {
		t.Fatalf("record: %d weights, the oldest gone kept %v, web-2 %+v", len(sw.Weights), oldest, sw.Weights["id-2"])
	}

	ctx := context.Background()
	for _, d := range []time.Duration{0, goneAfter} {
		clock.add(d)
		if err := a.readSwitches(ctx, a.shared()); err != nil {
			t.Fatal(err)
		}
	}
	sw, size := record(t, storage)
	if len(sw.Weights) != 1 || sw.Weights["id-2"].Weight != 0 || size > 512 {
		t.Fatalf("after goneAfter: %d weights in %d bytes, want web-2's alone", len(sw.Weights), size)
	}
	if weightOf(a, "id-2") != 0 {
		t.Errorf("the pruning cleared the live weight: %d", weightOf(a, "id-2"))
	}
}

// R4e: a Caddy whose catalog has not been listed yet, or whose daemon is
// out of reach (reconnecting), prunes nothing: an instance it lacks may
// only be one it has not heard of. A weight of an instance that comes
// back before goneAfter stays.
func TestFleet_R4e_an_unsynced_catalog_prunes_nothing(t *testing.T) {
	ctx := context.Background()
	t.Run("not listed", func(t *testing.T) {
		storage := &fleet.Memory{}
		storeGone(t, storage, 3)
		clock := newFakeClock()
		c := Fixture{Kind: "docker", Address: "unix:///d.sock", Catalog: catalog.New(catalog.Options{})}.Conn()
		t.Cleanup(func() { c.cancel() })
		c.switches.now = clock.now
		c.ShareThrough(storage, fleet.Self{ID: "c"})
		following(c)
		for _, d := range []time.Duration{0, time.Hour} {
			clock.add(d)
			if err := c.readSwitches(ctx, c.shared()); err != nil {
				t.Fatal(err)
			}
		}
		if sw, _ := record(t, storage); len(sw.Weights) != 3 {
			t.Errorf("a catalog not listed pruned: %d weights left of 3", len(sw.Weights))
		}
	})
	t.Run("reconnecting", func(t *testing.T) {
		storage := &fleet.Memory{}
		storeGone(t, storage, 3)
		clock := newFakeClock()
		c := fleetConnAt(t, "caddy-c", storage, clock)
		c.status.update(func(s *Status) { s.setState(StateReconnecting, time.Now()) })
		for _, d := range []time.Duration{0, time.Hour} {
			clock.add(d)
			if err := c.readSwitches(ctx, c.shared()); err != nil {
				t.Fatal(err)
			}
		}
		if sw, _ := record(t, storage); len(sw.Weights) != 3 {
			t.Errorf("a reconnecting catalog pruned: %d weights left of 3", len(sw.Weights))
		}
	})
	t.Run("back within goneAfter", func(t *testing.T) {
		storage := &fleet.Memory{}
		storeGone(t, storage, 1)
		clock := newFakeClock()
		c := fleetConnAt(t, "caddy-c", storage, clock)
		following(c)
		for _, step := range []func(){
			func() {},
			func() {
				c.Catalog().Put(catalog.Instance{ID: "old-00000", Name: "web-old-0", State: catalog.StateRunning})
			},
			func() { c.Catalog().Delete("old-00000") },
		} {
			step()
			if err := c.readSwitches(ctx, c.shared()); err != nil {
				t.Fatal(err)
			}
			clock.add(goneAfter / 2)
		}
		if sw, _ := record(t, storage); len(sw.Weights) != 1 {
			t.Error("a weight whose instance was back within goneAfter was pruned")
		}
	})
}

// R4e: an operator can always clear: a clear by name reaches the weight of
// an instance the daemon no longer has (answered as gone), and a clear
// of a live instance removes the weights of gone ones too.
func TestFleet_R4e_a_clear_reaches_the_weights_of_gone_instances(t *testing.T) {
	storage := &fleet.Memory{}
	storeGone(t, storage, 3)
	clock := newFakeClock()
	a := fleetConnAt(t, "caddy-a", storage, clock)
	following(a)
	_, gone, err := a.SetWeight(byName("web-old-1"), -1)
	if err != nil || len(gone) != 1 || gone[0] != (GoneWeight{ID: "old-00001", Name: "web-old-1"}) {
		t.Fatalf("clear of a gone instance by name: %v, %v", gone, err)
	}
	if sw, _ := record(t, storage); len(sw.Weights) != 2 {
		t.Fatalf("record after the clear: %d weights, want 2", len(sw.Weights))
	}
	if err := a.readSwitches(context.Background(), a.shared()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.SetWeight(byName("web-1"), 4); err != nil {
		t.Fatal(err)
	}
	clock.add(goneAfter)
	if _, _, err := a.SetWeight(byName("web-1"), -1); err != nil {
		t.Fatal(err)
	}
	if sw, _ := record(t, storage); len(sw.Weights) != 0 {
		t.Errorf("record after a clear: %v, want the gone weights cleared too", sw.Weights)
	}
}

// R4e: an unchanged record is read by its Stat alone once settled, and
// never decoded again; a change through another Caddy is applied.
func TestFleet_R4e_an_unchanged_record_is_not_loaded_nor_decoded(t *testing.T) {
	storage := &fleet.StatMemory{}
	storeGone(t, storage, 1000)
	clock := newFakeClock()
	b := fleetConnAt(t, "caddy-b", storage, clock)
	ctx := context.Background()
	read := func(int) {
		t.Helper()
		clock.add(time.Second)
		if err := b.readSwitches(ctx, b.shared()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 { // the record's Stat settles
		read(i)
	}
	loads := storage.Loads()
	b.switches.mu.Lock()
	_, decodes := b.switches.reader.Counts()
	b.switches.mu.Unlock()
	for i := 3; i < 13; i++ {
		read(i)
	}
	b.switches.mu.Lock()
	_, decodesAfter := b.switches.reader.Counts()
	b.switches.mu.Unlock()
	if got := storage.Loads() - loads; got != 0 || decodesAfter != decodes {
		t.Fatalf("10 reads of an unchanged record: %d loads, %d decodes; want none", got, decodesAfter-decodes)
	}
	a := fleetConn(t, "caddy-a", storage)
	if _, _, err := a.SetWeight(byName("web-1"), 7); err != nil {
		t.Fatal(err)
	}
	read(13)
	if weightOf(b, "id-1") != 7 {
		t.Errorf("B after A's change: weight %d, want 7", weightOf(b, "id-1"))
	}
}

// R4e: a Caddy that (re)starts has the fleet's switches in force when its
// connection reports ready (Await returns), before its first request: a
// weight of 0 set through another Caddy on an instance it lists.
func TestFleet_R4e_switches_in_force_when_the_connection_reports_ready(t *testing.T) {
	storage := &fleet.Memory{}
	other := fleetConn(t, "caddy-a", storage)
	if _, _, err := other.SetWeight(byName("web-2"), 0); err != nil {
		t.Fatal(err)
	}
	c, err := New(Spec{Kind: "docker", Address: "unix:///d.sock", Run: func(ctx context.Context, sink catalog.Sink) {
		time.Sleep(20 * time.Millisecond) // the daemon answers its listing
		sink.Replace([]catalog.Instance{
			{ID: "id-1", Name: "web-1", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
			{ID: "id-2", Name: "web-2", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
		})
		<-ctx.Done()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destruct()
	c.ShareThrough(storage, fleet.Self{ID: "caddy-b-id", Host: "caddy-b"})
	c.Await(context.Background(), time.Now().Add(5*time.Second))
	if got := weightOf(c, "id-2"); got != 0 {
		t.Fatalf("web-2's weight when the connection reports ready: %d, want the fleet's 0", got)
	}
	if got := c.SwitchOrigin("id-2"); got != "caddy-a (caddy-a-id)" {
		t.Errorf("origin %q", got)
	}
}

// R4e: when the storage cannot be read, a connection reports ready within
// firstSwitchesWait and says why its switches are not in force.
func TestFleet_R4e_first_read_bounded_and_logged(t *testing.T) {
	storage := &fleet.Memory{}
	down := errors.New("down")
	storage.Fail.Store(&down)
	core, logs := observer.New(zapcore.WarnLevel)
	c, err := New(Spec{Kind: "docker", Address: "unix:///d.sock", Catalog: catalog.Options{Logger: zap.New(core)},
		Run: func(ctx context.Context, sink catalog.Sink) { sink.Replace(nil); <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destruct()
	c.ShareThrough(storage, fleet.Self{ID: "b"})
	start := time.Now()
	c.Await(context.Background(), time.Now().Add(5*time.Second))
	if waited := time.Since(start); waited > firstSwitchesWait+time.Second {
		t.Errorf("Await took %v with the storage down", waited)
	}
	found := false
	for _, e := range logs.All() {
		found = found || strings.Contains(e.Message, "could not be read before the routes serve")
	}
	if !found {
		t.Errorf("no warning that the switches were not read: %v", logs.All())
	}
}
