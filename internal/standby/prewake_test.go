package standby

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R5n: a pre-wake starts the wake a request would, and returns at once;
// the request that follows joins it: one start call in all.
func TestPreWake_R5n_request_joins_the_wake(t *testing.T) {
	f := &fakeActions{}
	w, cat, _ := newTestStandby(t, f)
	release := make(chan struct{})
	f.then = func(string, string) error {
		go func() {
			<-release
			cat.Put(sleeper(catalog.StateRunning))
		}()
		return nil
	}
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	route := catalog.Route{Port: 8080}
	if got := w.PreWake(cat.Snapshot(), route, "h", nil); got != PreWakeStarted {
		t.Fatalf("PreWake = %d, want started", got)
	}
	if got := w.PreWake(cat.Snapshot(), route, "h", nil); got != PreWakeUnderWay {
		t.Errorf("second PreWake = %d, want under way", got)
	}
	close(release)
	ts, retry := w.Hold(context.Background(), route, "h", 5*time.Second, nil)
	if len(ts) != 1 || retry != 0 || f.calls.Load() != 1 {
		t.Errorf("request got %v (retry %v) after %d start calls; want its container after 1", ts, retry, f.calls.Load())
	}
	if got := w.PreWake(cat.Snapshot(), route, "other", nil); got != PreWakeNothing {
		t.Errorf("PreWake for a host nobody claims = %d", got)
	}
}

// R5n: a ClientHello is not use. A pre-wake of a routable instance does
// nothing, its idle clock included; one a keep function refuses starts
// nothing.
func TestPreWake_R5n_is_not_use(t *testing.T) {
	f := &fakeActions{then: func(string, string) error { return nil }}
	w, cat, _ := newTestStandby(t, f)
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	route := catalog.Route{Port: 8080}
	if got := w.PreWake(cat.Snapshot(), route, "h", func(catalog.WakeCandidate) bool { return false }); got != PreWakeNothing {
		t.Errorf("PreWake with every candidate refused = %d", got)
	}
	if f.calls.Load() != 0 {
		t.Errorf("%d start calls", f.calls.Load())
	}
}

// R5n: a failed wake's backoff holds for pre-wakes too: deferred, no call.
func TestPreWake_R5n_backs_off_with_the_instance(t *testing.T) {
	f := &fakeActions{then: func(string, string) error { return fmt.Errorf("boom") }}
	w, cat, _ := newTestStandby(t, f)
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	route := catalog.Route{Port: 8080}
	if got := w.PreWake(cat.Snapshot(), route, "h", nil); got != PreWakeStarted {
		t.Fatalf("PreWake = %d", got)
	}
	testkit.Eventually(t, 5*time.Second, "the failed wake backing off", func() bool { a, _, waking := w.WakeBackoff("id-a"); return !a.IsZero() && !waking })
	for range 100 {
		if got := w.PreWake(cat.Snapshot(), route, "h", nil); got != PreWakeDeferred {
			t.Fatalf("PreWake while backing off = %d, want deferred", got)
		}
	}
	if f.calls.Load() != 1 {
		t.Errorf("%d start calls, want 1", f.calls.Load())
	}
}

// R5n: 1,000 pre-wakes over 100 hosts on standby start at most half of
// max_wakes at once, and leave the rest of the slots to requests: a
// request for another host wakes its instance while they run.
func TestPreWake_R5n_takes_half_of_max_wakes(t *testing.T) {
	f := &fakeActions{}
	w, cat, _ := newTestStandby(t, f)
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	f.then = func(_, id string) error {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		host := strings.TrimPrefix(id, "id-")
		go func() {
			if host != "request" {
				<-release
			}
			inFlight.Add(-1)
			cat.Put(sleeperFor(host, catalog.StateRunning))
		}()
		return nil
	}
	all := []catalog.Instance{sleeperFor("request", catalog.StateStopped)}
	for i := range 100 {
		all = append(all, sleeperFor(fmt.Sprint("h", i), catalog.StateStopped))
	}
	cat.Replace(all)
	route := catalog.Route{Port: 8080}
	started := 0
	for i := range 1000 {
		if w.PreWake(cat.Snapshot(), route, fmt.Sprint("h", i%100), nil) == PreWakeStarted {
			started++
		}
	}
	if want := preWakeSlots(defaultMaxWakes); started != want {
		t.Errorf("%d pre-wakes started, want %d (half of max_wakes %d)", started, want, defaultMaxWakes)
	}
	ts, retry := w.Hold(context.Background(), route, "request", 5*time.Second, nil)
	if len(ts) != 1 || retry != 0 {
		t.Errorf("the request's wake: %v, retry %v", ts, retry)
	}
	close(release)
	if got := most.Load(); got > defaultMaxWakes {
		t.Errorf("%d wakes at once, max_wakes is %d", got, defaultMaxWakes)
	}
}
