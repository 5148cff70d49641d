package lifecycle

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sink records what it is handed; block, while set, holds every Emit.
type sink struct {
	mu     sync.Mutex
	got    []string
	data   []map[string]any
	block  chan struct{}
	listen bool
}

func (s *sink) Listens(string) bool { return s.listen }

func (s *sink) Emit(name string, data map[string]any) {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, name)
	s.data = append(s.data, data)
}

func (s *sink) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(time.Millisecond) // poll the condition
	}
}

// R13e: events reach the sink in the order they were emitted, with the
// identity, the daemon and their own data; one known by ID alone is
// resolved when it is handed on.
func TestBus_R13e_in_order_with_identity(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New(ctx, Options{Kind: "docker", Daemon: "unix:///d.sock", Resolve: func(id string) (Instance, bool) {
		return Instance{ID: id, Name: "web-1", Hosts: []string{"a.test"}, Image: "img"}, id == "c1"
	}})
	s := &sink{listen: true}
	b.SetSink(s)
	b.Emit(Joined, Instance{ID: "c1", Name: "web-1", Hosts: []string{"a.test"}, Image: "img"}, map[string]any{"why": "running"})
	b.EmitID(Waking, "c1", "", map[string]any{"cause": "request"})
	b.EmitID(Standby, "gone", "old", nil)
	want := []string{Joined, Waking, Standby}
	waitFor(t, "three events", func() bool { return len(s.names()) == 3 })
	if got := s.names(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	d := s.data[1]
	if d["id"] != "c1" || d["name"] != "web-1" || d["host"] != "a.test" || d["image"] != "img" ||
		d["daemon_kind"] != "docker" || d["daemon"] != "unix:///d.sock" || d["cause"] != "request" {
		t.Errorf("waking's data: %v", d)
	}
	if d := s.data[2]; d["id"] != "gone" || d["name"] != "old" {
		t.Errorf("an instance gone by then keeps the name it was emitted with: %v", d)
	}
}

// R13e: Emit never blocks its caller: with the sink stuck, a full buffer
// drops what comes next, and counts it.
func TestBus_R13e_never_blocks_drops_counted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var dropped atomic.Int64
	b := New(ctx, Options{Dropped: func() { dropped.Add(1) }})
	s := &sink{listen: true, block: make(chan struct{})}
	b.SetSink(s)
	const extra = 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range BufferSize + 1 + extra { // one is held by the stuck sink
			b.Emit(Joined, Instance{ID: "x"}, nil)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked on a stuck sink")
	}
	if n := dropped.Load(); n < extra || n > extra+1 {
		t.Errorf("%d dropped, want %d (or one more, if the sink had not taken the first yet)", n, extra)
	}
	close(s.block)
	cancel()
	b.Wait()
}

// R13e: with no sink, or one that hears nothing of that name, nothing is
// queued nor dropped.
func TestBus_R13e_nothing_listens_nothing_queued(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dropped atomic.Int64
	b := New(ctx, Options{Dropped: func() { dropped.Add(1) }})
	for range 2 * BufferSize {
		b.Emit(Joined, Instance{ID: "x"}, nil)
	}
	b.SetSink(&sink{listen: false})
	for range 2 * BufferSize {
		b.Emit(Joined, Instance{ID: "x"}, nil)
	}
	if len(b.ch) != 0 || dropped.Load() != 0 {
		t.Errorf("%d queued, %d dropped, want none", len(b.ch), dropped.Load())
	}
	var nilBus *Bus
	nilBus.Emit(Joined, Instance{}, nil) // a connection without one (a fixture)
	nilBus.Wait()
}
