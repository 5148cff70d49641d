package standby

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/clients"
)

// R5d: one client sending max_held requests to a host whose wake takes
// long holds only its share of max_held (an eighth, at least 4): the rest
// of its requests get 503 with Retry-After at once, and another client's
// request is still held for the wake, not refused.
func TestStandby_R5d_one_client_cannot_fill_max_held(t *testing.T) {
	const maxHeld = 32
	f := &fakeActions{then: func(string, string) error { return nil }} // started, never routable
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := Join(ctx, NewEngine(f), cat, zap.NewNop(), Options{MaxHeld: maxHeld})
	t.Cleanup(func() { cancel(); w.Close() })
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	share := clients.ShareOf(maxHeld)

	outsider := netip.MustParsePrefix("192.0.2.1/32")
	reqCtx, endHeld := context.WithCancel(clients.With(context.Background(), outsider))
	defer endHeld()
	refused := make(chan time.Duration, maxHeld)
	var held sync.WaitGroup
	for range maxHeld {
		held.Add(1)
		go func() {
			defer held.Done()
			if _, retry := w.Hold(reqCtx, catalog.Route{Port: 8080}, "h", time.Minute, nil); reqCtx.Err() == nil {
				refused <- retry
			}
		}()
	}
	for i := range maxHeld - share {
		select {
		case retry := <-refused:
			if retry != retryAfterBusy {
				t.Errorf("the outsider's request %d beyond its share: Retry-After %s, want %s", i, retry, retryAfterBusy)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of the outsider's %d requests were refused, want %d (all beyond its share %d); held: %d",
				i, maxHeld, maxHeld-share, share, w.held.Load())
		}
	}
	if n := w.held.Load(); n != int64(share) {
		t.Errorf("%d requests held, want the outsider's share %d", n, share)
	}

	other := clients.With(context.Background(), netip.MustParsePrefix("2001:db8:1::/64"))
	otherCtx, endOther := context.WithCancel(other)
	otherDone := make(chan time.Duration, 1)
	go func() {
		_, retry := w.Hold(otherCtx, catalog.Route{Port: 8080}, "h", time.Minute, nil)
		otherDone <- retry
	}()
	for deadline := time.Now().Add(5 * time.Second); w.held.Load() != int64(share)+1; {
		select {
		case retry := <-otherDone:
			t.Fatalf("another client's request was answered at once (Retry-After %s) while the outsider holds its share", retry)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests held, want %d: the other client's is not", w.held.Load(), share+1)
		}
		time.Sleep(time.Millisecond) // poll the condition
	}
	endOther()
	<-otherDone
	endHeld()
	held.Wait()
	if n := w.shares.Held(outsider); n != 0 {
		t.Errorf("the outsider still counts %d held once its requests ended", n)
	}
}
