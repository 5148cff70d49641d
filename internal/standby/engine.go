// Package standby is scale to zero on a daemon that cannot wake on connect
// (Docker): Caddy itself wakes a container labelled caddy.standby_after
// when a request finds its route with nothing routable, holds the request
// until the catalog shows the container ready, and puts the container on
// standby (stop or pause) once no request went through this Caddy for
// standby_after and none is in flight (reverse_proxy's own count, learnt
// again as reverse_proxy renews it). The state of an Engine's instances
// (wakes, failed wakes, activity) is shared by every connection to that
// Engine (R5f).
//
// An Engine is that shared state, one per Docker Engine; a Waker is one
// connection's part of it (its catalog, idle loop, caps and stand-in
// upstreams). The package knows the catalog, not Caddy: the caller turns
// a stand-in's address into an upstream and learns reverse_proxy's
// in-flight counters (see Waker.Routed).
package standby

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/heal"
)

// Actions are the writes a connection may make to its daemon; the
// adapter refuses them for an instance without the label.
type Actions interface {
	Start(ctx context.Context, id string, labels map[string]string) error
	Stop(ctx context.Context, id string, labels map[string]string) error
	Pause(ctx context.Context, id string, labels map[string]string) error
	Unpause(ctx context.Context, id string, labels map[string]string) error
	// Denied reports an error that says the daemon refuses this client the
	// write (a read-only socket): retrying cannot help.
	Denied(err error) bool
	// Gone reports an error that says the instance does not exist: it was
	// removed, and the catalog has not followed its removal yet (Podman
	// sends its events 50 to 100 ms late). Another instance may serve.
	Gone(err error) bool
	// Unreachable reports an error of the daemon's client that says the
	// daemon could not be reached (R5g), beyond what any network error
	// says (a refused or reset connection, a timeout, an early end).
	Unreachable(err error) bool
	// Close closes the client; the Engine calls it once its last
	// connection is gone.
	Close() error
}

const (
	// DefaultWakeTimeout is the wake_timeout setting's default: how long
	// a request waits for the instance it woke.
	DefaultWakeTimeout = 30 * time.Second
	// retryAfterWaking is the Retry-After of a request whose hold ended at
	// wake_timeout while the container kept starting.
	retryAfterWaking = 5 * time.Second
	// wakeWatch bounds how long a wake may take to make its container
	// routable before it counts as failed.
	wakeWatch = 2 * time.Minute
	// firstBackoff is how long a container whose wake failed is not woken
	// again; each further failure in a row doubles it, up to maxBackoff.
	firstBackoff = time.Minute
	maxBackoff   = 30 * time.Minute
	// actionTimeout bounds one Engine write.
	actionTimeout = 30 * time.Second
	// defaultMaxWakes and defaultMaxHeld are the max_wakes and max_held
	// settings' defaults (R5d).
	defaultMaxWakes = 4
	defaultMaxHeld  = 1000
	// retryAfterBusy is the Retry-After of a request refused because
	// max_held requests are held already (R5d).
	retryAfterBusy = 5 * time.Second
	// unreachableRetry is how soon a held request tries its wake again
	// after the Engine could not be reached (R5g).
	unreachableRetry = 250 * time.Millisecond
	// retryAfterUnreachable is the Retry-After of a request whose hold
	// ended while the Engine could not be reached.
	retryAfterUnreachable = time.Second
	// goneGrace is how long a request whose wake found its container gone
	// waits for the catalog to follow the Engine (the removal, and the
	// create of a container replacing it) when nothing else can be woken.
	goneGrace = time.Second
)

// WakeResult is how a wake ended, as the caddy_dicer_wakes_total metric
// labels it (see Options.Counted).
type WakeResult string

const (
	WakeReady    WakeResult = "ready"    // the container became routable
	WakeExited   WakeResult = "exited"   // it stopped again before it was ready
	WakeDenied   WakeResult = "denied"   // the daemon refused the write
	WakeError    WakeResult = "error"    // the write failed otherwise
	WakeTooSlow  WakeResult = "too_slow" // not routable within wakeWatch
	WakeCanceled WakeResult = "canceled" // the connection closed meanwhile
	// WakeUnreachable: the Engine could not be reached (no answer,
	// connection refused or reset, a timeout): no failure of the
	// container's, so no backoff (R5g).
	WakeUnreachable WakeResult = "unreachable"
	// WakeGone: the Engine has no such container (removed, its removal
	// not followed yet): the request held on it wakes another, or waits
	// up to goneGrace for the catalog to catch up (R5c).
	WakeGone WakeResult = "gone"
)

// Engine is the scale-to-zero state of one Docker Engine, shared by every
// connection to it whatever their other settings (R5f): the caller keeps
// it in its pool of connections (Destruct closes it), and each connection
// to the Engine Joins it.
type Engine struct {
	actions Actions

	mu       sync.Mutex
	wakes    map[string]*wake    // by instance ID, in progress
	failures map[string]*failure // by instance ID, the last wakes failed
	acting   map[string]bool     // IDs being put on standby
	// actingPeak is acting's largest size since it was last made: a Go
	// map keeps its size, so one that held thousands (all due together)
	// is made anew once empty (releaseActing).
	actingPeak int
	shared     map[string]*sharedActivity // by instance ID
	members    map[*Waker]bool            // the connections' parts
	denied     bool                       // a write was refused once (logged once)
	warned     map[string]bool            // what warnOnce said already (R5k), at most maxWarned

	// waking holds the IDs of the wakes in progress, for Waking: read
	// under the catalog's lock, where e.mu may not be taken.
	waking sync.Map

	// fleet is what the Caddys sharing a storage tell each other (R5m,
	// fleet.go); nil until ShareThrough. held are the instances another
	// Caddy keeps awake, until when (under mu).
	fleet       atomic.Pointer[fleetState]
	held        map[string]time.Time
	fleetOnce   sync.Once
	fleetStop   context.CancelFunc
	fleetDone   chan struct{}
	fleetHealth fleet.Health // the storage failed (logged once, until it works again)
	// fleetKick tells the publisher an instance was used after a quiet
	// time: its lease is written at once, not at the next tick.
	fleetKick chan struct{}
	// gone are the instances a catalog dropped since the publisher last
	// looked (under mu; at most maxGone): their lease folders go.
	gone map[string]struct{}

	// heals is the Engine's healing state (R1e), shared by its
	// connections as the rest is.
	heals *heal.Ledger

	// cpuReads bounds the CPU reads in flight (R5r, cpu.go), and
	// cpuFailed says one failed (warned once, under mu).
	cpuReads  chan struct{}
	cpuFailed bool
}

// sharedActivity is the Activity every connection's catalog entry for one
// instance is linked to, and how many of them are.
type sharedActivity struct {
	act  *catalog.Activity
	refs int
	// after is the instance's standby_after, for its fleet lease (R5m),
	// and pool says it is labelled caddy.soft_limit: the fleet's load on
	// it is read every second (R5j).
	after time.Duration
	pool  bool
	// cpu is what the CPU veto remembers of it (R5r, cpu.go): nil until
	// its first read; it goes with the instance.
	cpu *cpuState
}

// NewEngine is the scale-to-zero state of the Engine that actions write
// to, with no connection yet.
func NewEngine(actions Actions) *Engine {
	return &Engine{
		actions: actions, wakes: map[string]*wake{}, failures: map[string]*failure{},
		acting: map[string]bool{}, shared: map[string]*sharedActivity{}, members: map[*Waker]bool{},
		held: map[string]time.Time{}, fleetKick: make(chan struct{}, 1), heals: heal.NewLedger(),
		cpuReads: make(chan struct{}, maxCPUReads),
	}
}

// Destruct closes the Engine client; the pool calls it when the last
// connection to the Engine is gone.
func (e *Engine) Destruct() error {
	e.stopFleet()
	return e.actions.Close()
}

// HealLedger is the healing state of the Waker's Engine (R1e), shared by
// every connection to it.
func (w *Waker) HealLedger() *heal.Ledger { return w.engine.heals }

// Busy reports whether scale to zero is waking the instance id or putting
// it on standby, on any connection to the Engine: healing leaves it alone
// meanwhile (R1e).
func (w *Waker) Busy(id string) bool {
	if w.Waking(id) {
		return true
	}
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acting[id] || e.wakes[id] != nil
}
