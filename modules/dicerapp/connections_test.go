package dicerapp

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// R1b: whichever connections ask, the process returns memory to the
// operating system at most once every ReturnMemoryEvery.
func TestReadiness_R1b_memory_returned_at_most_once_per_ReturnMemoryEvery(t *testing.T) {
	p := &pool{UsagePool: caddy.NewUsagePool(), conns: make(map[string]*connection.Conn)}
	if !p.returnMemory() {
		t.Fatal("the first return was refused")
	}
	if p.returnMemory() {
		t.Fatal("a second return at once was made")
	}
	p.returned = time.Now().Add(-ReturnMemoryEvery + time.Minute)
	if p.returnMemory() {
		t.Fatalf("a return %s after the last was made", ReturnMemoryEvery-time.Minute)
	}
	p.returned = time.Now().Add(-ReturnMemoryEvery)
	if !p.returnMemory() {
		t.Fatalf("a return %s after the last was refused", ReturnMemoryEvery)
	}
}

// blocker is a pool value whose Destruct does nothing.
type blocker struct{}

func (blocker) Destruct() error { return nil }

// R9: listing the open connections (the admin API, a metrics scrape)
// while one is being made whose constructor asks the pool for another
// value (a Docker connection's shared standby engine) hangs neither.
// With the UsagePool's Range, the listing held the pool's lock waiting
// for the value being made, and the constructor waited for that lock:
// a Caddy whose admin API was asked during a config load hung for good.
func TestPool_R9_listing_does_not_wait_for_a_connection_being_made(t *testing.T) {
	p := &pool{UsagePool: caddy.NewUsagePool(), conns: make(map[string]*connection.Conn)}
	inside, listing := make(chan struct{}), make(chan struct{})
	made := make(chan error, 1)
	go func() {
		_, _, err := p.LoadOrNew("conn", func() (caddy.Destructor, error) {
			close(inside)
			<-listing
			// The listing has begun: give it time to reach the value
			// being made, as a request during a load does, then ask the
			// pool for another value, as SharedEngine does.
			time.Sleep(50 * time.Millisecond)
			_, _, err := p.LoadOrNew("standby", func() (caddy.Destructor, error) { return blocker{}, nil })
			return blocker{}, err
		})
		made <- err
	}()
	<-inside
	listed := make(chan int, 1)
	go func() {
		close(listing)
		listed <- len(p.open())
	}()
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case err := <-made:
			if err != nil {
				t.Fatal(err)
			}
		case <-listed:
		case <-deadline:
			t.Fatal("listing the connections while one is being made hung the pool")
		}
	}
}
