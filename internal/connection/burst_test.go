package connection

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1b: once a first listing of at least BurstInstances instances is
// applied and the first attempts of its probes are through, the
// connection asks once for the burst's memory to be returned; after a
// smaller one it does not.
func TestReadiness_R1b_large_first_listing_returns_its_memory(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want int32
	}{{BurstInstances, 1}, {BurstInstances - 1, 0}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			instances := make([]catalog.Instance, tc.n)
			for i := range instances {
				instances[i] = catalog.Instance{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("box-", i), State: catalog.StateRunning}
			}
			listed := make(chan struct{})
			var calls atomic.Int32
			c, err := New(Spec{Kind: "dicer", Address: "test",
				Run: func(ctx context.Context, sink catalog.Sink) {
					sink.Replace(instances)
					close(listed)
					<-ctx.Done()
				},
				ReturnMemory: func() bool { calls.Add(1); return true },
			})
			if err != nil {
				t.Fatal(err)
			}
			c.Await(context.Background(), time.Now().Add(10*time.Second))
			<-listed
			// The call comes from its own goroutine, which ends by itself
			// once the listing and the prober's first attempts are through.
			done := make(chan struct{})
			go func() { c.returning.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the listing's memory was not considered within 10 s of its settling")
			}
			if err := c.Destruct(); err != nil {
				t.Fatal(err)
			}
			if got := calls.Load(); got != tc.want {
				t.Fatalf("%d instances: ReturnMemory called %d times, want %d", tc.n, got, tc.want)
			}
		})
	}
}
