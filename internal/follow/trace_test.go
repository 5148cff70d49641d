package follow

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTrace: a Trace in Run's context hears each listing, with the cause of
// each re-listing, and each end of a session, whatever the adapter.
func TestTrace(t *testing.T) {
	script := []step{
		{listed: true, lasts: time.Second, err: errors.New("cut off")},
		{err: errors.New("no socket")},
		{listed: true, lasts: time.Second, err: errors.New("transport closing")},
		{listed: true, lasts: time.Second, err: errors.New("refused")},
		{listed: true, lasts: time.Second, err: errors.New("transport closing")},
	}
	var mu sync.Mutex
	var listed, ended []string
	trace := &Trace{
		Listed: func(_ int, relisted bool, cause string) {
			mu.Lock()
			defer mu.Unlock()
			if relisted {
				listed = append(listed, "relisted after "+cause)
			} else {
				listed = append(listed, "first listing")
			}
		},
		Ended: func(e End, wasListed bool, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			ended = append(ended, RelistCause(e))
		},
	}
	ctx, cancel := context.WithCancel(WithTrace(context.Background(), trace))
	defer cancel()
	clock := newFakeClock()
	replaced := make(chan struct{}, 1)
	d := &fakeDaemon{clock: clock, script: script, cancel: cancel, replaced: replaced}
	l := &Loop{Daemon: d, Name: "Test daemon", Things: "boxes", Thing: "box", clock: clock.now, sleep: clock.sleep}
	l.Run(ctx, signalSink{replaced}, nil)

	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first listing", "relisted after fell_behind", "relisted after lost", "relisted after refused"}; !slices.Equal(listed, want) {
		t.Errorf("listings %q, want %q", listed, want)
	}
	if want := []string{CauseFellBehind, CauseUnreachable, CauseLost, CauseRefused, CauseLost}; !slices.Equal(ended, want) {
		t.Errorf("ends %q, want %q", ended, want)
	}
}

// TestPendingReceived: a coalesced burst keeps the time its first event
// arrived, for the event-to-catalog latency.
func TestPendingReceived(t *testing.T) {
	p := NewPending()
	before := time.Now()
	p.Add("a", false)
	first := time.Now()
	p.Add("a", false)
	ids, _, _ := p.Take()
	if at := ids["a"].Received; at.Before(before) || at.After(first) {
		t.Errorf("received %v, want the first event's time, in [%v, %v]", at, before, first)
	}
}
