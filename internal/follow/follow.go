// Package follow is the daemon-neutral part of following a daemon's
// instances: the whole session (subscribe first, then list, Replace, then
// each event coalesced into one fetch of the instance it names, applied or
// dropped, or into one re-listing of the group of instances it names), the
// reconnect loop around sessions with its two paces, and the
// way it reports why a session ended without flooding the log while a
// daemon stays down (R6).
//
// An adapter (internal/dicer, internal/docker, internal/swarm) implements only its daemon's
// calls, as a Daemon and the Conn it opens for each session: connect,
// subscribe (reporting the instances each event touches or deletes, and
// daemon-wide changes, and groups), list, fetch one instance, re-read what a
// daemon-wide change touched (and, a GroupConn, a group), translate the daemon's records into
// catalog.Instance values, and explain the error that ended a session.
package follow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
)

// Deadlines of a session's calls other than the event stream. Keepalive
// catches a dead peer; these catch a daemon that accepts a call and never
// answers it.
const (
	// CallTimeout bounds one Fetch or Refresh, and each call an adapter
	// makes on its own within List.
	CallTimeout = 30 * time.Second
	// ListTimeout bounds one List.
	ListTimeout = 2 * time.Minute
)

// ErrNotFound is what Conn.Fetch wraps when the instance is gone: the
// session drops it from the sink.
var ErrNotFound = errors.New("not found")

// Daemon is what an adapter implements for its daemon. The Loop calls it
// from one goroutine.
type Daemon interface {
	// Connect opens one session's connection, which logs what is its own
	// to log. It need not reach the daemon yet: a client whose first call
	// fails is fine. An error that names no call is logged as the
	// "connect" call's.
	Connect(ctx context.Context, log *zap.Logger) (Conn, error)
	// Explain turns the error that ended a session (nil if none) into an
	// End.
	Explain(err error) End
}

// Conn is one session's connection to the daemon. The session calls its
// methods from one goroutine, in this order: Subscribe, List, then Fetch
// and Refresh as events come, and Close; the Stream runs in a goroutine of
// its own meanwhile. Errors should name the daemon call at fault with
// WrapCall.
type Conn interface {
	// Subscribe starts following the daemon's events. It returns once
	// every change from then on will be reported by the Stream (Dicer: the
	// stored history is through), so that the listing that follows misses
	// nothing.
	Subscribe(ctx context.Context) (Stream, error)
	// List returns every instance, translated, and the fields the
	// "connected" log line carries besides the count. It runs under
	// ListTimeout.
	List(ctx context.Context) (Listing, error)
	// Fetch returns one instance, translated, or an error wrapping
	// ErrNotFound if it is gone. It runs under CallTimeout.
	Fetch(ctx context.Context, id string) (catalog.Instance, error)
	// Refresh is called when the Stream reported a daemon-wide change: it
	// re-reads what changed and returns the known instances it changes
	// (new values: the sink keeps what it is given). known is every
	// instance the session fed the sink, by ID; Refresh must not modify
	// it. It runs under CallTimeout. An adapter whose Stream never reports
	// a daemon-wide change returns nil, nil.
	Refresh(ctx context.Context, known map[string]catalog.Instance) ([]catalog.Instance, error)
	// Close releases the connection.
	Close() error
}

// Prefetcher is a Conn whose Fetch is a daemon call that may run beside
// others (Inspect: concurrently safe, no state of the connection changed)
// followed by the rest (Finish: called from the session's goroutine, one at
// a time, as Fetch is). Fetch(ctx, id) must equal Finish(id,
// Inspect(ctx, id)). A session fetches a batch of events' IDs with it,
// PrefetchWorkers calls at once.
type Prefetcher interface {
	Inspect(ctx context.Context, id string) (any, error)
	Finish(id string, raw any, err error) (catalog.Instance, error)
}

// Stream reads a subscription until it ends, calling report for each
// event, and returns the error that ended it (the Subscribe context being
// done included). It must not call the daemon otherwise: the session
// fetches, so that a slow fetch cannot make the daemon cut the
// subscription off or drop events for it.
type Stream func(report func(Event)) error

// Event is what one event tells the session.
type Event struct {
	// ID is the instance the event touches; "" with DaemonWide.
	ID string
	// Deleted says the instance is gone: it is dropped without a fetch.
	Deleted bool
	// DaemonWide says something that is about no one instance changed
	// (Dicer: a network): the session calls Conn.Refresh.
	DaemonWide bool
	// Stopping says the event itself tells that the instance is stopping
	// or stopped (Docker: a kill with a terminating signal, die, stop):
	// the session takes it out of its rotations at once, from the stream,
	// before the fetch fills in the rest (catalog.Sink.Stopping).
	Stopping bool
	// Why says, with Stopping, what the event tells of why ("exited with
	// code 1", "killed with SIGKILL"), for the log (catalog.StoppingBecause).
	Why string
	// Started says the instance (re)started, which ends a Stopping.
	Started bool
	// Group names a group of instances the event changes as a whole
	// (Swarm: a service, whose update or scale adds and removes tasks):
	// the session calls GroupConn.Sync with it, bursts coalesced. ID is
	// "" then. Only a Conn that implements GroupConn may report one.
	Group string
}

// GroupConn is a Conn whose instances come in groups that an event can
// name as a whole (Swarm: a service's tasks, which a scale or an update
// changes without an event per task).
type GroupConn interface {
	Conn
	// Sync re-reads the instances of one group an event named: those it
	// holds now (new values: the sink keeps what it is given) and the IDs
	// of instances it held that are gone. It runs under CallTimeout.
	Sync(ctx context.Context, group string) (current []catalog.Instance, gone []string, err error)
}

// StopBound is a Conn that bounds how long an event saying an instance is
// stopping (Event.Stopping) holds it out of its rotations while the daemon
// still reports it running (R6e): a container that ignores its stop
// signal, say. Once the bound is past, the session fetches the instance
// again and, if it still runs, ends the hold (Sink.Started) and logs it.
type StopBound interface {
	Conn
	// StopBound is the bound for the instance with this ID, as the last
	// Fetch of it told (its stop timeout plus a margin); zero or less: no
	// bound, the hold lasts until the instance stops or starts again.
	StopBound(id string) time.Duration
}

// Listing is what Conn.List returns.
type Listing struct {
	Instances []catalog.Instance
	// Fields are added to the "connected" log line.
	Fields []zap.Field
	// Version is what the daemon said of itself this session, if the
	// adapter asked (R9a); the session hands it to Trace.Version.
	Version daemonver.Version
}

// End is why a session ended, as the adapter explains it.
type End struct {
	// Call is the daemon call at fault ("" if none); logged as "call".
	Call string
	// Reason is what a user can act on; logged as "error". It is also the
	// key that keeps a repeated failure from being logged at error level
	// more than once.
	Reason string
	// Auth says the daemon refused this client, which no reconnection
	// fixes: an error even after a listing.
	Auth bool
	// Unreachable says the daemon could not be reached at all (no socket,
	// connection refused or closed before any answer): retrying costs the
	// daemon nothing, so a session that ended so before listing is
	// followed by the connect pace (Pace.ConnectMax), not the re-list one.
	Unreachable bool
	// Lost, if set, replaces the warning logged when a session that had
	// listed ends ("lost the <Name>: ...").
	Lost string
	// Stalled says the session ended because its event stream was open
	// but silent while the daemon answered (ErrStalled); the Loop sets it.
	Stalled bool
}

// Key is a hash of settings that shape a connection (a token or a file's
// contents among them), safe to keep and compare: equal keys can share one
// connection.
func Key(settings ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(settings, "\x00")))
	return hex.EncodeToString(sum[:])
}

// ErrUnusable is what Conn.Fetch wraps when the daemon's answer cannot be
// used (the instance returned is not the one asked for): the session keeps
// what the sink has of the instance and goes on; the adapter logs why.
var ErrUnusable = errors.New("unusable answer")
