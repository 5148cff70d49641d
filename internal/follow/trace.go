package follow

import (
	"context"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
)

// Trace is told what a Loop does, for metrics and status pages: hooks,
// each optional, called from the Loop's goroutines (EventReceived from the
// stream's). They must not block. Attach one to the context given to
// Loop.Run with WithTrace, as net/http/httptrace does, so that every
// adapter's loop reports without knowing it.
type Trace struct {
	// Listed is called once a session's listing is in the sink: the
	// daemon is followed. relisted is false for the loop's first listing;
	// cause is then why the last session that had listed ended (see
	// RelistCause).
	Listed func(instances int, relisted bool, cause string)
	// Ended is called when a session ends, with the adapter's explanation
	// and the delay before the next.
	Ended func(e End, listed bool, retryIn time.Duration)
	// EventReceived is called for each event the stream reports.
	EventReceived func()
	// EventApplied is called once the catalog holds what one or more
	// events about one instance (or a daemon-wide change) told, with the
	// time the first of them was received.
	EventApplied func(received time.Time)
	// Resynced is called after each periodic re-listing (Loop.Resync)
	// with the number of instances it found changed (or new) and gone:
	// changes the event stream had not applied yet, or lost.
	Resynced func(changed, gone int)
	// Stalled is called when a session ends because its event stream was
	// open but silent while the daemon answered (ErrStalled); Ended
	// follows.
	Stalled func()
	// Version is called with what the daemon said of itself, once per
	// session that asked (R9a), before Listed.
	Version func(v daemonver.Version)
}

type traceKey struct{}

// WithTrace returns ctx carrying t, for Loop.Run.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// traceFrom is the Trace in ctx, or an empty one.
func traceFrom(ctx context.Context) *Trace {
	if t, ok := ctx.Value(traceKey{}).(*Trace); ok && t != nil {
		return t
	}
	return &Trace{}
}

func (t *Trace) version(v daemonver.Version) {
	if t.Version != nil && !v.Zero() {
		t.Version(v)
	}
}

func (t *Trace) listed(n int, relisted bool, cause string) {
	if t.Listed != nil {
		t.Listed(n, relisted, cause)
	}
}

func (t *Trace) ended(e End, listed bool, retryIn time.Duration) {
	if t.Ended != nil {
		t.Ended(e, listed, retryIn)
	}
}

func (t *Trace) eventReceived() {
	if t.EventReceived != nil {
		t.EventReceived()
	}
}

func (t *Trace) eventApplied(received time.Time) {
	if t.EventApplied != nil {
		t.EventApplied(received)
	}
}

func (t *Trace) resynced(changed, gone int) {
	if t.Resynced != nil {
		t.Resynced(changed, gone)
	}
}

func (t *Trace) stalled() {
	if t.Stalled != nil {
		t.Stalled()
	}
}

// Causes of a re-listing, as RelistCause names them: a bounded set, fit
// for a metric label.
const (
	// CauseRefused: the daemon refused this client (End.Auth).
	CauseRefused = "refused"
	// CauseFellBehind: the daemon cut the session off for falling behind
	// its events (End.Lost set).
	CauseFellBehind = "fell_behind"
	// CauseUnreachable: the daemon could not be reached (End.Unreachable).
	CauseUnreachable = "unreachable"
	// CauseStalled: the event stream was open but silent while the daemon
	// answered (ErrStalled).
	CauseStalled = "stalled"
	// CauseLost: the session ended otherwise (a daemon restart, a cut
	// stream, a failed call).
	CauseLost = "lost"
)

// RelistCause names why a session ended, among the Cause constants.
func RelistCause(e End) string {
	switch {
	case e.Auth:
		return CauseRefused
	case e.Stalled:
		return CauseStalled
	case e.Lost != "":
		return CauseFellBehind
	case e.Unreachable:
		return CauseUnreachable
	}
	return CauseLost
}
