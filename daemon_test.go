package caddydicer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// TestSharedConnection_R9_reload_counts checks the life of a shared
// connection over a reload: the new config's modules join it before the old
// ones leave (2 -> 4 -> 2), and it closes with the last one.
func TestSharedConnection_R9_reload_counts(t *testing.T) {
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.111", map[string]string{"app": "web", "caddy.host": "web.example.com"})
	settings := DicerDaemon{Address: "unix:" + sock}
	f, err := resolve(&settings)
	if err != nil {
		t.Fatal(err)
	}
	load := func() (caddy.Context, *DicerUpstreams, *DicerPermission) {
		ctx, _ := newLoad(t)
		u := &DicerUpstreams{DicerDaemon: settings, upstreamSource: upstreamSource{Selector: "app=web"}}
		p := &DicerPermission{DicerDaemon: settings}
		if err := u.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx, u, p
	}
	refs := func() int {
		n := dicerapp.References(f.key)
		return n
	}

	_, u1, p1 := load()
	if refs() != 2 {
		t.Fatalf("first config: %d references, want 2", refs())
	}
	if err := p1.CertificateAllowed(context.Background(), "web.example.com"); err != nil {
		t.Fatalf("claimed host refused after the first listing: %v", err)
	}
	_, u2, p2 := load()
	if refs() != 4 {
		t.Fatalf("during the reload: %d references, want 4", refs())
	}
	if u1.conn != u2.conn || p1.conn != u2.conn {
		t.Fatal("the new config got a connection of its own")
	}
	u1.Cleanup()
	p1.Cleanup()
	if refs() != 2 {
		t.Fatalf("after the reload: %d references, want 2", refs())
	}
	if n := d.Calls("ListInstances"); n != 1 {
		t.Errorf("ListInstances called %d times, want 1: the reload reconnected", n)
	}
	u2.Cleanup()
	p2.Cleanup()
	if refs() != 0 {
		t.Fatalf("after the last cleanup: %d references, want 0", refs())
	}
	select {
	case <-u2.conn.Done():
	default:
		t.Fatal("the connection still follows the daemon after its last user left")
	}
}

// TestSharedConnection_R9_settings_key: equal settings share, different ones
// do not.
func TestSharedConnection_R9_settings_key(t *testing.T) {
	a, _ := resolve(&DicerDaemon{Address: "unix:/a.sock"})
	a2, _ := resolve(&DicerDaemon{Address: "unix:/a.sock"})
	b, _ := resolve(&DicerDaemon{Address: "unix:/b.sock"})
	c, _ := resolve(&DicerDaemon{Address: "unix:/a.sock", PublishedPortHost: "10.0.0.5"})
	r, _ := resolve(&DicerDaemon{Address: "unix:/a.sock", Readiness: Readiness{ReadinessTimeout: caddy.Duration(time.Minute)}})
	if a.key == "" || a.key != a2.key {
		t.Error("equal settings got different keys")
	}
	if a.key == b.key || a.key == c.key || a.key == r.key {
		t.Error("different settings share a key")
	}
}

// TestSharedConnection_R9_down_daemon_waited_for_once: with the daemon
// down, the first module of a config waits (boundedly) for a listing that
// does not come; the other modules on that connection do not wait again,
// so a config's load time does not grow with its number of routes.
func TestSharedConnection_R9_down_daemon_waited_for_once(t *testing.T) {
	settings := DicerDaemon{Address: "unix:" + filepath.Join(t.TempDir(), "nobody.sock")}
	ctx, cancel := newLoad(t)
	defer cancel()
	provision := func(m interface {
		Provision(caddy.Context) error
		Cleanup() error
	},
	) time.Duration {
		start := time.Now()
		if err := m.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Cleanup() })
		return time.Since(start)
	}
	first := provision(&DicerUpstreams{DicerDaemon: settings})
	second := provision(&DicerPermission{DicerDaemon: settings})
	third := provision(&DicerUpstreams{DicerDaemon: settings, upstreamSource: upstreamSource{Selector: "app=web"}})
	if first < startupWait {
		t.Errorf("first module waited %s for a daemon that is down, want the full %s", first, startupWait)
	}
	if second > startupWait/2 || third > startupWait/2 {
		t.Errorf("later modules waited again: %s and %s", second, third)
	}
}

// TestSharedConnection_R9_down_daemons_waited_for_once_per_load: a config
// naming two daemons that are both down waits for their first listings
// once, not once per daemon, so that `caddy validate` or a start with N
// daemons down takes one startupWait, not N; a second load of the same
// daemons waits no more.
func TestSharedConnection_R9_down_daemons_waited_for_once_per_load(t *testing.T) {
	dir := t.TempDir()
	load := func() time.Duration {
		ctx, cancel := newLoad(t)
		t.Cleanup(cancel)
		start := time.Now()
		for i, m := range []interface {
			Provision(caddy.Context) error
			Cleanup() error
		}{
			&DicerUpstreams{DicerDaemon: DicerDaemon{Address: "unix:" + filepath.Join(dir, "a.sock")}},
			&DicerPermission{DicerDaemon: DicerDaemon{Address: "unix:" + filepath.Join(dir, "b.sock")}},
			&DicerUpstreams{DicerDaemon: DicerDaemon{Address: "unix:" + filepath.Join(dir, "b.sock")}, upstreamSource: upstreamSource{Selector: "app=web"}},
		} {
			// As the http app does for each server: a context of the same
			// load, with a value.
			mctx := ctx
			mctx.Context = context.WithValue(ctx.Context, testServerKey{}, i)
			if err := m.Provision(mctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Cleanup() })
		}
		return time.Since(start)
	}
	// Two waits would take 2*startupWait; the slack is for a loaded machine.
	if took := load(); took < startupWait || took > startupWait*3/2 {
		t.Errorf("the load took %s with two daemons down, want one startupWait (%s), not one per daemon", took, startupWait)
	}
	if took := load(); took > startupWait/2 {
		t.Errorf("a second load of the same daemons took %s, want no wait: they were given theirs", took)
	}
}

type testServerKey struct{}

// newLoad returns the context of a new, empty config load, as Caddy gives
// its modules (with the config's apps, such as the dicer app), and its cancel.
func newLoad(t testing.TB) (caddy.Context, context.CancelFunc) {
	t.Helper()
	base, err := caddy.ProvisionContext(&caddy.Config{})
	if err != nil {
		t.Fatalf("provision an empty config: %v", err)
	}
	return caddy.NewContext(base)
}
