package follow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// groupDaemon lists a1 and a2 (group g) and b; its stream names group g
// three times in a burst. Sync(g) says a1 changed and a2 is gone.
type groupDaemon struct {
	syncs chan string
	// noGroups makes its Conn a plain Conn, without Sync.
	noGroups bool
	ended    chan error
}

func (d *groupDaemon) Connect(context.Context, *zap.Logger) (follow.Conn, error) {
	c := &groupConn{d: d}
	if d.noGroups {
		return plainConn{c}, nil
	}
	return c, nil
}

func (d *groupDaemon) Explain(err error) follow.End {
	select {
	case d.ended <- err:
	default:
	}
	return follow.End{Reason: "ended"}
}

type groupConn struct{ d *groupDaemon }

func (c *groupConn) Subscribe(ctx context.Context) (follow.Stream, error) {
	return func(report func(follow.Event)) error {
		for range 3 {
			report(follow.Event{Group: "g"})
		}
		<-ctx.Done()
		return ctx.Err()
	}, nil
}

func (c *groupConn) List(context.Context) (follow.Listing, error) {
	return follow.Listing{Instances: []catalog.Instance{
		{ID: "a1", Name: "a1", State: catalog.StateStarting},
		{ID: "a2", Name: "a2", State: catalog.StateRunning},
		{ID: "b", Name: "b", State: catalog.StateRunning},
	}}, nil
}

func (c *groupConn) Fetch(context.Context, string) (catalog.Instance, error) {
	return catalog.Instance{}, errors.New("no fetch expected")
}

func (c *groupConn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

func (c *groupConn) Sync(_ context.Context, group string) ([]catalog.Instance, []string, error) {
	c.d.syncs <- group
	return []catalog.Instance{{ID: "a1", Name: "a1", State: catalog.StateRunning}}, []string{"a2"}, nil
}

func (c *groupConn) Close() error { return nil }

// plainConn hides Sync.
type plainConn struct{ c *groupConn }

func (p plainConn) Subscribe(ctx context.Context) (follow.Stream, error) { return p.c.Subscribe(ctx) }
func (p plainConn) List(ctx context.Context) (follow.Listing, error)     { return p.c.List(ctx) }
func (p plainConn) Fetch(ctx context.Context, id string) (catalog.Instance, error) {
	return p.c.Fetch(ctx, id)
}

func (p plainConn) Refresh(ctx context.Context, k map[string]catalog.Instance) ([]catalog.Instance, error) {
	return p.c.Refresh(ctx, k)
}
func (p plainConn) Close() error { return nil }

// An event naming a group makes the session Sync it (a burst once or
// more, never once per event beyond the burst): what it returns is Put,
// what it says is gone is Deleted, the rest is untouched.
func TestSessionSyncsGroups(t *testing.T) {
	d := &groupDaemon{syncs: make(chan string, 10), ended: make(chan error, 1)}
	loop := &follow.Loop{Daemon: d, Name: "Test daemon", Things: "instances", Thing: "instance"}
	sink, _ := followtest.Start(t, 5*time.Second, func(ctx context.Context, log *zap.Logger, s catalog.Sink) { loop.Run(ctx, s, log) })
	sink.WaitFor(t, 5*time.Second, "a1 running, a2 gone, b kept", func(v followtest.View) bool {
		_, a2 := v.ByID["a2"]
		_, b := v.ByID["b"]
		return v.ByID["a1"].State == catalog.StateRunning && !a2 && b
	})
	if g := <-d.syncs; g != "g" {
		t.Fatalf("synced %q, want g", g)
	}
	if n := len(d.syncs); n > 2 {
		t.Fatalf("%d more syncs for a burst of 3 events", n)
	}
}

// A stream that names a group over a Conn without Sync ends the session
// with an error that says so, rather than dropping the event.
func TestSessionGroupWithoutSync(t *testing.T) {
	d := &groupDaemon{syncs: make(chan string, 10), noGroups: true, ended: make(chan error, 1)}
	loop := &follow.Loop{Daemon: d, Name: "Test daemon", Things: "instances", Thing: "instance"}
	followtest.Start(t, 5*time.Second, func(ctx context.Context, log *zap.Logger, s catalog.Sink) { loop.Run(ctx, s, log) })
	select {
	case err := <-d.ended:
		if err == nil || !strings.Contains(err.Error(), "no groups") {
			t.Fatalf("session ended with %v, want an error about groups", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
}
