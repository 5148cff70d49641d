package caddydicer

import (
	"context"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestSharedConnection_R9_reload_counts checks the life of a shared
// connection over a reload: the new config's modules join it before the old
// ones leave (2 -> 4 -> 2), and it closes with the last one.
func TestSharedConnection_R9_reload_counts(t *testing.T) {
	d, sock := testDaemon(t)
	instance(t, d, "web-1", "127.0.0.111", map[string]string{"app": "web", "caddy.host": "web.example.com"})
	settings := Daemon{Address: "unix:" + sock}
	f, err := settings.follower()
	if err != nil {
		t.Fatal(err)
	}
	load := func() (caddy.Context, *DicerUpstreams, *DicerPermission) {
		ctx, _ := caddy.NewContext(caddy.Context{Context: context.Background()})
		u := &DicerUpstreams{Daemon: settings, upstreamSource: upstreamSource{Selector: "app=web"}}
		p := &DicerPermission{Daemon: settings}
		if err := u.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx, u, p
	}
	refs := func() int {
		n, _ := connections.References(f.key)
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
	case <-u2.conn.done:
	default:
		t.Fatal("the connection still follows the daemon after its last user left")
	}
}

// TestSharedConnection_R9_settings_key: equal settings share, different ones
// do not.
func TestSharedConnection_R9_settings_key(t *testing.T) {
	a, _ := (&Daemon{Address: "unix:/a.sock"}).follower()
	a2, _ := (&Daemon{Address: "unix:/a.sock"}).follower()
	b, _ := (&Daemon{Address: "unix:/b.sock"}).follower()
	c, _ := (&Daemon{Address: "unix:/a.sock", PublishedPortHost: "10.0.0.5"}).follower()
	if a.key != a2.key {
		t.Error("equal settings got different keys")
	}
	if a.key == b.key || a.key == c.key {
		t.Error("different settings share a key")
	}
}
