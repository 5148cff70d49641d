package follow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// barrierConn is a Prefetcher whose Inspect answers only once want calls
// are in flight together (or, past a deadline, with an error), and whose
// Finish counts calls made beside another.
type barrierConn struct {
	fakeConn
	want                  int
	mu                    sync.Mutex
	inFlight              int
	peak                  int
	released              chan struct{}
	once                  sync.Once
	finishing, overlapped atomic.Int32
}

func (c *barrierConn) Inspect(ctx context.Context, id string) (any, error) {
	c.mu.Lock()
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	if c.inFlight >= c.want {
		c.once.Do(func() { close(c.released) })
	}
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.inFlight--; c.mu.Unlock() }()
	select {
	case <-c.released:
		return id, nil
	case <-time.After(2 * time.Second):
		return nil, errors.New("never had enough calls in flight together")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *barrierConn) Finish(id string, raw any, err error) (catalog.Instance, error) {
	if c.finishing.Add(1) > 1 {
		c.overlapped.Add(1)
	}
	defer c.finishing.Add(-1)
	if err != nil {
		return catalog.Instance{}, err
	}
	return catalog.Instance{ID: raw.(string), Name: "n-" + id, State: catalog.StateRunning}, nil
}

type putSink struct {
	signalSink
	mu  sync.Mutex
	put map[string]bool
}

func (s *putSink) Put(in catalog.Instance) { s.mu.Lock(); s.put[in.ID] = true; s.mu.Unlock() }

// A burst of events (a tenant starting many instances at once) is fetched
// PrefetchWorkers daemon calls at a time, not one after the other: the
// last instance of the burst waits for the daemon's answer time once per
// PrefetchWorkers calls, not once per call before it. The rest of each
// fetch (Finish) runs one at a time. Sequential fetching fails this test:
// Inspect answers only when PrefetchWorkers calls are in flight together.
func TestPrefetch_R6_a_burst_is_fetched_several_at_once(t *testing.T) {
	conn := &barrierConn{want: PrefetchWorkers, released: make(chan struct{})}
	sink := &putSink{put: map[string]bool{}}
	s := &session{loop: &Loop{Name: "test daemon", Thing: "instance"}, conn: conn, sink: sink,
		known: map[string]catalog.Instance{}, holds: map[string]time.Time{}}
	ids := map[string]PendingEvent{}
	for i := range 3 * PrefetchWorkers {
		ids[fmt.Sprintf("i%02d", i)] = PendingEvent{}
	}
	ids["gone"] = PendingEvent{Deleted: true}
	fetched := s.prefetch(context.Background(), ids)
	if len(fetched) != 3*PrefetchWorkers {
		t.Fatalf("prefetched %d, want %d (the deleted one is not fetched)", len(fetched), 3*PrefetchWorkers)
	}
	for id, ev := range ids {
		if err := s.apply(context.Background(), id, ev, fetched[id]); err != nil {
			t.Fatalf("apply %s: %v", id, err)
		}
	}
	if len(sink.put) != 3*PrefetchWorkers {
		t.Errorf("the sink got %d instances, want %d", len(sink.put), 3*PrefetchWorkers)
	}
	if conn.peak > PrefetchWorkers {
		t.Errorf("%d daemon calls at once, want at most %d", conn.peak, PrefetchWorkers)
	}
	if n := conn.overlapped.Load(); n != 0 {
		t.Errorf("Finish ran beside another %d times, want one at a time", n)
	}
	// One ID: no goroutines, Fetch as before.
	if got := s.prefetch(context.Background(), map[string]PendingEvent{"a": {}}); got != nil {
		t.Errorf("a batch of one was prefetched: %v", got)
	}
}
