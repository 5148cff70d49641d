package standby

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// leaseFiles is the lease files under a file storage's folder dir, and
// the lease folders.
func leaseFiles(dir string) (files, folders int) {
	root := filepath.Join(dir, "dicer", "fleet", "leases")
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		folders++
		sub, _ := os.ReadDir(filepath.Join(root, e.Name()))
		files += len(sub)
	}
	return files, folders
}

// leasingCaddy is a Caddy's Engine over a catalog of one container used
// once, sharing a file storage; Close its Waker and Destruct its Engine
// to stop it.
type leasingCaddy struct {
	eng    *Engine
	w      *Waker
	cat    *catalog.Catalog
	cancel context.CancelFunc
}

func newLeasingCaddy(t *testing.T, s fleet.Storage) *leasingCaddy {
	t.Helper()
	c := &leasingCaddy{cat: catalog.New(catalog.Options{})}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.eng = NewEngine(&fakeActions{then: func(string, string) error { return nil }})
	c.w = Join(ctx, c.eng, c.cat, zap.NewNop(), Options{})
	fl := fleet.New(fleet.Self{ID: "caddy"})
	fl.SetStorage(s)
	c.eng.ShareThrough(fl, zap.NewNop(), nil)
	c.cat.Replace([]catalog.Instance{sleeper(catalog.StateRunning)}) // standby_after 1h
	ts := c.cat.Snapshot().Targets(nil, catalog.Route{Port: 8080}, "h")
	if len(ts) != 1 {
		t.Fatalf("targets %v", ts)
	}
	c.w.Routed(ts[0].Activity, ts[0].Dial)
	ts[0].Activity.Touch(time.Now())
	return c
}

// stop is the Caddy stopping for good: its connection's Waker closes,
// then the Engine, its last, is destructed.
func (c *leasingCaddy) stop() {
	c.cancel()
	c.w.Close()
	_ = c.eng.Destruct()
}

// R5m: a Caddy that stops releases its leases (3 restarts with a fresh
// data directory left a lease each for good); a config reload that
// keeps the Engine (one connection of two closes) keeps them.
func TestFleet_R5m_leases_released_at_shutdown(t *testing.T) {
	dir := t.TempDir()
	s := &certmagic.FileStorage{Path: dir}
	for restart := range 3 {
		c := newLeasingCaddy(t, s)
		testkit.Eventually(t, 5*time.Second, "the lease written", func() bool { files, _ := leaseFiles(dir); return files == 1 })
		if restart == 0 { // a reload: a second connection joins, the first leaves
			ctx, cancel := context.WithCancel(context.Background())
			cat := catalog.New(catalog.Options{})
			other := Join(ctx, c.eng, cat, zap.NewNop(), Options{})
			cat.Replace([]catalog.Instance{sleeper(catalog.StateRunning)})
			testkit.Eventually(t, 5*time.Second, "the new connection linked", func() bool {
				c.eng.mu.Lock()
				defer c.eng.mu.Unlock()
				return c.eng.shared["id-a"] != nil && c.eng.shared["id-a"].refs == 2
			})
			c.cancel()
			c.w.Close()
			time.Sleep(2 * publishEvery) // the publisher's looks meanwhile
			if files, _ := leaseFiles(dir); files != 1 {
				t.Fatalf("a reload that keeps the Engine: %d leases, want 1", files)
			}
			c.w, c.cancel = other, cancel
		}
		c.stop()
		if files, _ := leaseFiles(dir); files != 0 {
			t.Fatalf("restart %d: %d leases left after the Caddy stopped, want 0", restart, files)
		}
	}
}

// R5m: the lease folder of a container removed from the daemon goes, in
// a file storage (200 containers deployed and removed left 200 folders).
func TestFleet_R5m_the_folder_of_a_gone_container_goes(t *testing.T) {
	dir := t.TempDir()
	c := newLeasingCaddy(t, &certmagic.FileStorage{Path: dir})
	defer c.stop()
	testkit.Eventually(t, 5*time.Second, "the lease written", func() bool { _, folders := leaseFiles(dir); return folders == 1 })
	c.cat.Replace(nil) // removed from the daemon
	testkit.Eventually(t, 5*time.Second, "the folder removed", func() bool { _, folders := leaseFiles(dir); return folders == 0 })
}

// callCounter counts the calls of a fleet.Memory.
type callCounter struct {
	fleet.Memory
	calls atomic.Int32
}

func (c *callCounter) Store(ctx context.Context, key string, value []byte) error {
	c.calls.Add(1)
	return c.Memory.Store(ctx, key, value)
}

func (c *callCounter) Load(ctx context.Context, key string) ([]byte, error) {
	c.calls.Add(1)
	return c.Memory.Load(ctx, key)
}

func (c *callCounter) List(ctx context.Context, dir string, rec bool) ([]string, error) {
	c.calls.Add(1)
	return c.Memory.List(ctx, dir, rec)
}

func (c *callCounter) Delete(ctx context.Context, key string) error {
	c.calls.Add(1)
	return c.Memory.Delete(ctx, key)
}

// R5j, R5m: pool instances (caddy.soft_limit) this Caddy does not route
// to cost no storage call (each cost a List a second: 1,000 idle, 1,000
// calls a second per Caddy); one it routes to is read every second.
func TestFleet_R5m_idle_pool_instances_cost_no_storage_calls(t *testing.T) {
	labels := map[string]string{catalog.LabelHost: "h", catalog.LabelSoftLimit: "1", catalog.LabelStandbyAfter: "1h"}
	var insts []catalog.Instance
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		insts = append(insts, member(name, catalog.StateRunning, labels))
	}
	p := newPoolCase(t, insts...)
	s := &callCounter{}
	fl := fleet.New(fleet.Self{ID: "me"})
	fl.SetStorage(s)
	p.w.Engine().ShareThrough(fl, zap.NewNop(), nil)
	t.Cleanup(p.w.Engine().stopFleet)
	time.Sleep(3 * publishEvery) // three looks of the publisher
	if n := s.calls.Load(); n != 0 {
		t.Errorf("10 idle pool instances: %d storage calls in 3 s, want 0", n)
	}
	ts := p.cat.Snapshot().Targets(nil, catalog.Route{Port: 8080}, "h")
	p.w.Routed(ts[0].Activity, ts[0].Dial)
	ts[0].Activity.Touch(time.Now())
	testkit.Eventually(t, 3*time.Second, "the routed instance read", func() bool { return s.calls.Load() >= 2 })
}
