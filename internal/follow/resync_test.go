package follow_test

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// liveDaemon is a made-up daemon whose instances a test edits, with or
// without sending the event a real daemon would.
type liveDaemon struct {
	mu        sync.Mutex
	instances map[string]catalog.Instance
	events    chan follow.Event // what the next session's stream reports
	sessions  atomic.Int32
}

func newLiveDaemon(in ...catalog.Instance) *liveDaemon {
	d := &liveDaemon{instances: map[string]catalog.Instance{}, events: make(chan follow.Event)}
	for _, i := range in {
		d.instances[i.ID] = i
	}
	return d
}

// set changes an instance without an event (an event lost, or a stalled
// stream); a zero Instance with only an ID removes it.
func (d *liveDaemon) set(in catalog.Instance, remove bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if remove {
		delete(d.instances, in.ID)
		return
	}
	d.instances[in.ID] = in
}

func (d *liveDaemon) Connect(context.Context, *zap.Logger) (follow.Conn, error) {
	d.sessions.Add(1)
	return liveConn{d}, nil
}

func (d *liveDaemon) Explain(err error) follow.End {
	_, cause := follow.Call(err)
	if cause == nil {
		return follow.End{Reason: "session ended"}
	}
	return follow.End{Reason: cause.Error()}
}

type liveConn struct{ d *liveDaemon }

func (c liveConn) Subscribe(ctx context.Context) (follow.Stream, error) {
	return func(report func(follow.Event)) error {
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e := <-c.d.events:
				report(e)
			}
		}
	}, nil
}

func (c liveConn) List(context.Context) (follow.Listing, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return follow.Listing{Instances: append([]catalog.Instance(nil), slicesOf(c.d.instances)...)}, nil
}

func slicesOf(m map[string]catalog.Instance) []catalog.Instance {
	out := make([]catalog.Instance, 0, len(m))
	for v := range maps.Values(m) {
		out = append(out, v)
	}
	return out
}

func (c liveConn) Fetch(_ context.Context, id string) (catalog.Instance, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	in, ok := c.d.instances[id]
	if !ok {
		return catalog.Instance{}, follow.ErrNotFound
	}
	return in, nil
}

func (liveConn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

func (liveConn) Close() error { return nil }

func running(id string) catalog.Instance {
	return catalog.Instance{ID: id, Name: id, State: catalog.StateRunning}
}

// blockingSink is a Sink whose Stopping waits until released: a catalog
// busy under its lock.
type blockingSink struct {
	*followtest.Sink
	release chan struct{}
}

func (s blockingSink) Stopping(id string) {
	<-s.release
	s.Sink.Stopping(id)
}

// TestSession_StreamNeverWaitsOnTheSink: the stream goroutine keeps
// reading events while the sink is stuck in a Stopping call (the Docker
// Engine drops events for a subscriber that stops reading: its queue of
// 1024 full for 100 ms). On e790bcf the stream called Stopping itself.
func TestSession_StreamNeverWaitsOnTheSink(t *testing.T) {
	d := newLiveDaemon(running("a"))
	inner := followtest.NewSink()
	sink := blockingSink{Sink: inner, release: make(chan struct{})}
	loop := &follow.Loop{Daemon: d, Name: "test daemon", Things: "instances", Thing: "instance"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); loop.Run(ctx, sink, nil) }()
	defer func() { close(sink.release); cancel(); <-done }()
	inner.WaitFor(t, 5*time.Second, "the listing", func(v followtest.View) bool { return v.Replaces == 1 })

	const n = 2000
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case d.events <- follow.Event{ID: "a", Stopping: true}:
		case <-deadline:
			t.Fatalf("the stream stopped reading after %d of %d events while the sink was busy", i, n)
		}
	}
}

// TestSession_ResyncAppliesLostChanges: with Loop.Resync, changes whose
// events never came (a lost die, a removal, a new instance) reach the sink
// within a re-listing. On e790bcf there is no re-listing: they never do.
func TestSession_ResyncAppliesLostChanges(t *testing.T) {
	d := newLiveDaemon(running("a"), running("b"))
	loop := &follow.Loop{Daemon: d, Name: "test daemon", Things: "instances", Thing: "instance",
		Resync: 20 * time.Millisecond, StallGrace: time.Hour}
	sink, _ := followtest.Start(t, 5*time.Second, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		loop.Run(ctx, sink, log)
	})
	sink.WaitFor(t, 5*time.Second, "the listing", func(v followtest.View) bool { return len(v.ByID) == 2 })

	stopped := running("a")
	stopped.State = catalog.StateStopped
	d.set(stopped, false)
	d.set(catalog.Instance{ID: "b"}, true)
	d.set(running("c"), false)
	sink.WaitFor(t, 5*time.Second, "a stopped, b gone, c new", func(v followtest.View) bool {
		_, b := v.ByID["b"]
		return v.ByID["a"].State == catalog.StateStopped && !b && v.ByID["c"].State == catalog.StateRunning
	})
	if n := d.sessions.Load(); n != 1 {
		t.Errorf("%d sessions: a re-listing must not reconnect", n)
	}
}

// TestSession_StalledStreamReconnects: a re-listing that finds changes the
// stream never reported, and no event within the grace after it, ends the
// session as stalled (logged once, traced) and the loop reconnects; while
// events flow, the same changes do not.
func TestSession_StalledStreamReconnects(t *testing.T) {
	d := newLiveDaemon(running("a"))
	var stalls atomic.Int32
	var causes sync.Map
	trace := &follow.Trace{
		Stalled: func() { stalls.Add(1) },
		Listed: func(_ int, relisted bool, cause string) {
			if relisted {
				causes.Store(cause, true)
			}
		},
	}
	loop := &follow.Loop{Daemon: d, Name: "test daemon", Things: "instances", Thing: "instance",
		Resync: 20 * time.Millisecond, StallGrace: 30 * time.Millisecond}
	sink, logs := followtest.Start(t, 5*time.Second, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		loop.Run(follow.WithTrace(ctx, trace), sink, log)
	})
	sink.WaitFor(t, 5*time.Second, "the listing", func(v followtest.View) bool { return len(v.ByID) == 1 })

	stopped := running("a")
	stopped.State = catalog.StateStopped
	d.set(stopped, false)
	followtest.WaitLog(t, logs, 5*time.Second, zapcore.WarnLevel, "stalled (open, but silent)")
	deadline := time.Now().Add(5 * time.Second)
	for d.sessions.Load() < 2 || !loaded(&causes, follow.CauseStalled) {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection after the stall: %d sessions, %d stalls", d.sessions.Load(), stalls.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if sink.Snapshot().ByID["a"].State != catalog.StateStopped {
		t.Error("the change the re-listing found is not in the sink")
	}
}

// TestSession_NoStallWhileEventsFlow: changes a re-listing finds while the
// stream reports events (an event on its way) do not end the session.
func TestSession_NoStallWhileEventsFlow(t *testing.T) {
	d := newLiveDaemon(running("a"), running("busy"))
	loop := &follow.Loop{Daemon: d, Name: "test daemon", Things: "instances", Thing: "instance",
		Resync: 10 * time.Millisecond, StallGrace: 50 * time.Millisecond}
	sink, _ := followtest.Start(t, 5*time.Second, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		loop.Run(ctx, sink, log)
	})
	sink.WaitFor(t, 5*time.Second, "the listing", func(v followtest.View) bool { return len(v.ByID) == 2 })
	stop := make(chan struct{})
	flowing := make(chan struct{})
	go func() {
		defer close(flowing)
		for {
			select {
			case <-stop:
				return
			case d.events <- follow.Event{ID: "busy"}:
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for i := range 20 {
		in := running("a")
		in.Labels = map[string]string{"n": string(rune('a' + i))}
		d.set(in, false)
		want := in.Labels["n"]
		sink.WaitFor(t, 5*time.Second, "the change re-listed", func(v followtest.View) bool { return v.ByID["a"].Labels["n"] == want })
	}
	close(stop)
	<-flowing
	if n := d.sessions.Load(); n != 1 {
		t.Errorf("%d sessions: the stream reported events, it was not stalled", n)
	}
}

func loaded(m *sync.Map, key string) bool {
	_, ok := m.Load(key)
	return ok
}
