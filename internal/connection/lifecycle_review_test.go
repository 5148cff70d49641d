package connection

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// captureSink keeps what it is handed.
type captureSink struct {
	mu     sync.Mutex
	events []map[string]any
	names  []string
}

func (s *captureSink) Listens(string) bool { return true }
func (s *captureSink) Emit(name string, data map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
	s.events = append(s.events, data)
}

// R13e, an outsider's requests (review s48): the client picks the Host of
// a request a full queue refuses, and sends as many as it likes. The
// dicer_queue_overflow event's host is bounded (a DNS name's 253 bytes,
// not the megabyte of a header), and a flood of refusals on one route
// gives at most one event a second, so that it does not crowd the other
// tenants' events out of the connection's buffer of 1,024.
func TestQueueOverflow_R13e_bounded_against_a_flood(t *testing.T) {
	c := Fixture{Kind: "docker", Address: "test", Catalog: catalog.New(catalog.Options{})}.Conn()
	c.events = c.newBus()
	sink := &captureSink{}
	c.SetEventSink(sink)
	t.Cleanup(func() { c.cancel(); c.events.Wait() })

	long := strings.Repeat("a", 1<<20) + ".example.com"
	for range 2 * lifecycle.BufferSize {
		c.QueueOverflow("route", long, 100, 100)
	}
	c.events.Emit(lifecycle.Joined, lifecycle.Instance{ID: "x", Name: "x"}, map[string]any{"why": "sentinel"})
	if !testkit.Until(10*time.Second, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.names) > 0 && sink.names[len(sink.names)-1] == lifecycle.Joined
	}) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		t.Fatalf("the event after the flood was not handed on (%d events): dropped for the flood", len(sink.names))
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	overflows := len(sink.names) - 1
	if overflows < 1 || overflows > 2 {
		t.Errorf("%d dicer_queue_overflow events for a flood on one route within a second or two; want 1 or 2", overflows)
	}
	for _, d := range sink.events[:overflows] {
		if h, _ := d["host"].(string); len(h) > 253 {
			t.Errorf("the event's host is %d bytes; want at most 253", len(h))
		}
	}
}
