// Package followtest helps test a daemon adapter: a catalog.Sink that
// records what the adapter feeds it and lets a test wait for a condition on
// it, a harness that runs the adapter for the length of a test, waits on
// the adapter's logs, and a scripted daemon for its follow.Loop.
package followtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// Sink records what the adapter feeds it and lets a test wait for a
// condition on it. It also checks the Sink contract that calls never
// overlap (see Overlapped).
type Sink struct {
	mu       sync.Mutex
	byID     map[string]catalog.Instance
	replaces int
	puts     int
	history  []catalog.Instance // every Put's instance, in order
	stopping map[string]bool
	changed  chan struct{} // closed and replaced on every call

	busy    atomic.Int32
	overlap atomic.Bool
}

var _ catalog.Sink = (*Sink)(nil)

// NewSink returns an empty Sink.
func NewSink() *Sink {
	return &Sink{byID: map[string]catalog.Instance{}, changed: make(chan struct{})}
}

func (s *Sink) enter() func() {
	if s.busy.Add(1) != 1 {
		s.overlap.Store(true)
	}
	return func() { s.busy.Add(-1) }
}

func (s *Sink) bumpLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Replace implements catalog.Sink.
func (s *Sink) Replace(list []catalog.Instance) {
	defer s.enter()()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID = make(map[string]catalog.Instance, len(list))
	for _, in := range list {
		s.byID[in.ID] = in
	}
	s.replaces++
	s.bumpLocked()
}

// Put implements catalog.Sink.
func (s *Sink) Put(in catalog.Instance) {
	defer s.enter()()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[in.ID] = in
	s.puts++
	s.history = append(s.history, in)
	s.bumpLocked()
}

// Puts is the number of Put calls so far: the catalog writes an adapter
// made for single instances.
func (s *Sink) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

// PutsSince is what the Put calls after the first n of them wrote, in
// order.
func (s *Sink) PutsSince(n int) []catalog.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n >= len(s.history) {
		return nil
	}
	return slices.Clone(s.history[n:])
}

// Delete implements catalog.Sink.
func (s *Sink) Delete(id string) {
	defer s.enter()()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
	s.bumpLocked()
}

// Stopping implements catalog.Sink: it marks the instance as stopping (it
// may come from the stream's goroutine, beside the other calls).
func (s *Sink) Stopping(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping == nil {
		s.stopping = map[string]bool{}
	}
	s.stopping[id] = true
	s.bumpLocked()
}

// Started implements catalog.Sink: it ends a Stopping.
func (s *Sink) Started(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.stopping, id)
	s.bumpLocked()
}

// IsStopping reports whether Stopping was called for id since its last
// Started.
func (s *Sink) IsStopping(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping[id]
}

// Replaces returns the number of Replace calls so far.
func (s *Sink) Replaces() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaces
}

// Overlapped reports whether two calls ever overlapped, which the
// catalog.Sink contract forbids.
func (s *Sink) Overlapped() bool { return s.overlap.Load() }

// View is the sink's state: the instances by ID and the number of Replace
// calls so far.
type View struct {
	ByID     map[string]catalog.Instance
	Replaces int
}

// Named returns the instance with this name.
func (v View) Named(name string) (catalog.Instance, bool) {
	for _, in := range v.ByID {
		if in.Name == name {
			return in, true
		}
	}
	return catalog.Instance{}, false
}

// Labelled returns the instances whose label key is value, by name (tests
// that share a daemon tell their instances apart by a label).
func (v View) Labelled(key, value string) map[string]catalog.Instance {
	out := map[string]catalog.Instance{}
	for _, in := range v.ByID {
		if in.Labels[key] == value {
			out[in.Name] = in
		}
	}
	return out
}

func (v View) String() string {
	var names []string
	for _, in := range v.ByID {
		names = append(names, fmt.Sprintf("%s(%v/%v)", in.Name, in.State, in.Health))
	}
	return fmt.Sprintf("%d instances after %d replaces: %v", len(v.ByID), v.Replaces, names)
}

// Snapshot returns a copy of the current state.
func (s *Sink) Snapshot() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Sink) snapshotLocked() View {
	byID := make(map[string]catalog.Instance, len(s.byID))
	for k, v := range s.byID {
		byID[k] = v
	}
	return View{ByID: byID, Replaces: s.replaces}
}

// Check evaluates cond on the current state, which it must not keep.
func (s *Sink) Check(cond func(View) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cond(View{s.byID, s.replaces})
}

// WaitFor blocks until cond holds and returns a copy of the state it held
// on, failing the test after timeout. cond must not keep its View.
func (s *Sink) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(View) bool) View {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok := cond(View{s.byID, s.replaces})
		ch := s.changed
		var v View
		if ok {
			v = s.snapshotLocked()
		}
		s.mu.Unlock()
		if ok {
			return v
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; the sink has %v", timeout, what, s.Snapshot())
		}
	}
}

// WaitLog waits for a log entry at level whose message or error field
// contains substr, failing the test after timeout.
func WaitLog(t testing.TB, logs *observer.ObservedLogs, timeout time.Duration, level zapcore.Level, substr string) observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range logs.All() {
			if e.Level == level && (strings.Contains(e.Message, substr) || strings.Contains(fmt.Sprint(e.ContextMap()["error"]), substr)) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a %s log containing %q; logs:\n%s", level, substr, DumpLogs(logs))
		}
		time.Sleep(5 * time.Millisecond) // poll the condition
	}
}

// DumpLogs formats every entry, one a line, for a failure message.
func DumpLogs(logs *observer.ObservedLogs) string {
	var b strings.Builder
	for _, e := range logs.All() {
		fmt.Fprintf(&b, "  %s %s %v\n", e.Level, e.Message, e.ContextMap())
	}
	return b.String()
}

// Start runs an adapter until the test ends: run gets a logger recording
// every level and a new Sink, and is to follow its daemon until ctx is
// done. When the test ends, Start cancels ctx and checks that run returns
// within timeout and that it never called the sink from two goroutines at
// once.
func Start(t testing.TB, timeout time.Duration, run func(ctx context.Context, log *zap.Logger, sink catalog.Sink)) (*Sink, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	sink := NewSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx, zap.New(core), sink)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Error("Run did not return after its context was cancelled")
		}
		if sink.Overlapped() {
			t.Error("the adapter called the sink from two goroutines at once")
		}
	})
	return sink, logs
}

// Ended is how one scripted session ends.
type Ended struct {
	Listed bool
	Err    error
}

// PlaySessions runs loop with a scripted daemon in place of its Daemon:
// its sessions end as script says, one after the other (1ms apart, each
// counting as stable once listed), and explain is its Explain; the loop's
// context is cancelled at the session after the last. It returns the
// loop's logs.
func PlaySessions(loop *follow.Loop, explain func(error) follow.End, script ...Ended) *observer.ObservedLogs {
	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &replaceSignal{Sink: NewSink(), replaced: make(chan struct{}, 1)}
	d := &scripted{explain: explain, script: script, cancel: cancel, replaced: sink.replaced}
	loop.Daemon = d
	loop.Pace = follow.Pace{Min: time.Millisecond, Max: time.Millisecond, Stable: time.Nanosecond}
	loop.Run(ctx, sink, zap.New(core))
	return logs
}

// replaceSignal says when the listing reached the sink.
type replaceSignal struct {
	*Sink
	replaced chan struct{}
}

func (s *replaceSignal) Replace(list []catalog.Instance) {
	s.Sink.Replace(list)
	s.replaced <- struct{}{}
}

// scripted is a daemon whose sessions end as its script says.
type scripted struct {
	explain  func(error) follow.End
	script   []Ended
	n        int
	cancel   context.CancelFunc
	replaced chan struct{}
}

func (d *scripted) Explain(err error) follow.End { return d.explain(err) }

func (d *scripted) Connect(ctx context.Context, _ *zap.Logger) (follow.Conn, error) {
	d.n++
	if d.n > len(d.script) {
		d.cancel()
		return nil, ctx.Err()
	}
	e := d.script[d.n-1]
	if !e.Listed {
		return nil, e.Err
	}
	return scriptedConn{end: e.Err, replaced: d.replaced}, nil
}

// scriptedConn lists nothing, and its stream ends with end once the
// listing reached the sink.
type scriptedConn struct {
	end      error
	replaced chan struct{}
}

func (c scriptedConn) Subscribe(ctx context.Context) (follow.Stream, error) {
	return func(func(follow.Event)) error {
		select {
		case <-c.replaced:
			return c.end
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

func (scriptedConn) List(context.Context) (follow.Listing, error) { return follow.Listing{}, nil }

func (scriptedConn) Fetch(context.Context, string) (catalog.Instance, error) {
	return catalog.Instance{}, follow.ErrNotFound
}

func (scriptedConn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

func (scriptedConn) Close() error { return nil }

// Lines returns each entry as "level message".
func Lines(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Level.String()+" "+e.Message)
	}
	return out
}
