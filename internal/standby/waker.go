package standby

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

// Waker is one connection's part of scale to zero: its catalog's view of
// the Engine's instances, its idle loop, its caps on wakes and held
// requests (R5d), and the stand-in upstreams that answer 503 with
// Retry-After.
type Waker struct {
	// counted, if set, hears each wake's result (the wakes metric).
	counted func(WakeResult)
	// started, if set, hears each wake's cause as it starts (R5j, R5k).
	started func(WakeCause)
	// events hears wakes and standbys (R13e); nil: nothing does.
	events *lifecycle.Bus
	// now is the clock: time.Now, with its monotonic reading; tests
	// step it.
	now func() time.Time

	engine   *Engine
	ownsEnd  bool // engine is this connection's own (tests): closed with it
	catalog  *catalog.Catalog
	logger   *zap.Logger
	ctx      context.Context
	wg       sync.WaitGroup
	maxWakes int // wakes this connection may have in progress
	maxHeld  int // requests it may hold
	held     atomic.Int64
	kicks    chan struct{} // tells idleLoop of an instance served for the first time
	// touchMu guards touched: the Activities of instances served for the
	// first time since they started, for idleLoop to look at (R5l).
	touchMu sync.Mutex
	touched []*catalog.Activity
	// jobs are the instances waiting to be put on standby by one of
	// jobWorkers (at most maxStandbyCalls), under jobsMu (R5l).
	jobsMu     sync.Mutex
	jobs       []standbyJob
	jobWorkers int
	// linked are the catalog's Activities linked to the engine's shared
	// ones, by instance ID; idleLoop's alone.
	linked map[string]*catalog.Activity

	// Under engine.mu:
	standIns map[int]*standIn // by Retry-After seconds
	running  int              // wakes started here, in progress
	freed    chan struct{}    // closed when one of them ends
	closed   bool             // the connection is closing

	heldFull atomic.Bool // max_held was reached (logged once, until half as many are held)

	shares *clients.Share // what each client holds of maxHeld (R5d)
}

// touch tells idleLoop, without waiting, of the instance of Activity a
// served for the first time since it started: its idle time starts.
func (w *Waker) touch(a *catalog.Activity) {
	w.touchMu.Lock()
	w.touched = append(w.touched, a)
	w.touchMu.Unlock()
	w.kick()
}

// kick tells idleLoop to look again, without waiting: at what is due by
// its clock, and at the instances touch told it of.
func (w *Waker) kick() {
	select {
	case w.kicks <- struct{}{}:
	default:
	}
}

// takeTouched appends to dst the Activities touch was told of since the
// last call.
func (w *Waker) takeTouched(dst []*catalog.Activity) []*catalog.Activity {
	w.touchMu.Lock()
	defer w.touchMu.Unlock()
	dst = append(dst, w.touched...)
	clear(w.touched)
	w.touched = w.touched[:0]
	if cap(w.touched) > bigBuffer {
		w.touched = nil // 10,000 served at once would stay
	}
	return dst
}

// wake is one wake in progress: the start or unpause call, then the wait
// until the container is routable.
type wake struct {
	id, name string
	activity *catalog.Activity
	owner    *Waker        // the connection that runs it
	done     chan struct{} // closed with result set
	result   WakeResult
	chain    []string // the instances whose wakes wait on this one (R5k)
	// slotless: it gave its slot of max_wakes back while its
	// dependencies wake (R5k), under engine.mu.
	slotless bool
}

// maxWarned bounds the keys Waker.warnOnce remembers.
const maxWarned = 4096

// failure is a container not to wake again until after.
type failure struct {
	count int
	after time.Time
	gone  bool // the Engine had no such container: never woken again, no Retry-After of its own
}

// Options are one connection's settings of scale to zero.
type Options struct {
	// MaxWakes is the max_wakes setting: how many wakes the connection
	// may have in progress (R5d). 0: defaultMaxWakes (4).
	MaxWakes int
	// MaxHeld is the max_held setting: how many requests the connection
	// may hold waiting for wakes (R5d). 0: defaultMaxHeld (1000).
	MaxHeld int
	// Counted, if set, hears each wake's result (the wakes metric).
	Counted func(WakeResult)
	// Started, if set, hears why each wake starts (R5j, R5k).
	Started func(WakeCause)
	// Events, if set, hears each wake start (with its cause) and each
	// instance put on standby, as lifecycle events (R13e).
	Events *lifecycle.Bus
	// Clock is the clock, with its monotonic reading. nil: time.Now;
	// tests step it.
	Clock func() time.Time
}

// New is scale to zero for one connection with an Engine of its own (no
// other connection shares its state): Close closes actions.
func New(ctx context.Context, actions Actions, cat *catalog.Catalog, logger *zap.Logger, opts Options) *Waker {
	w := Join(ctx, NewEngine(actions), cat, logger, opts)
	w.ownsEnd = true
	return w
}

// Join is a connection's part of the Engine's scale to zero, for the
// instances of cat, until ctx is done and Close is called. It starts the
// idle loop that puts idle instances on standby.
func Join(ctx context.Context, eng *Engine, cat *catalog.Catalog, logger *zap.Logger, opts Options) *Waker {
	w := &Waker{
		engine: eng, catalog: cat, logger: logger, ctx: ctx, now: time.Now,
		counted: opts.Counted, started: opts.Started, events: opts.Events,
		maxWakes: opts.MaxWakes, maxHeld: opts.MaxHeld,
		kicks: make(chan struct{}, 1), linked: map[string]*catalog.Activity{},
		standIns: map[int]*standIn{}, freed: make(chan struct{}),
	}
	if opts.Clock != nil {
		w.now = opts.Clock
	}
	if w.maxWakes <= 0 {
		w.maxWakes = defaultMaxWakes
	}
	if w.maxHeld <= 0 {
		w.maxHeld = defaultMaxHeld
	}
	w.shares = clients.NewShare(clients.ShareOf(w.maxHeld))
	eng.mu.Lock()
	eng.members[w] = true
	eng.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.idleLoop()
	}()
	return w
}

// Close waits for the goroutines (call it once ctx is done), shuts the
// stand-ins and leaves the Engine.
func (w *Waker) Close() {
	e := w.engine
	e.mu.Lock()
	w.closed = true // no more wakes nor stand-ins
	e.mu.Unlock()
	w.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range w.standIns {
		_ = s.srv.Close()
	}
	delete(e.members, w)
	for id, a := range w.linked {
		e.unlinkLocked(id, a)
	}
	if w.ownsEnd {
		_ = e.actions.Close()
	}
}

// Routed notes a request routed to a labelled instance (its Activity a)
// at dial: now, and whether the request is to learn reverse_proxy's
// in-flight counter for dial (the first request to a dial address and one
// request per catalog.RelearnEvery, see catalog.Activity.Learning). If it
// is, the caller Begins on a and, once the request ends, Learns the
// counter on what Begin returned; until then that request counts as in
// flight. Atomics only, no lock: it is on the request path.
func (w *Waker) Routed(a *catalog.Activity, dial string) (learn bool) {
	now := w.now()
	first, afterQuiet := a.TouchAfter(now, quietBeforeKick)
	if first {
		w.touch(a) // served for the first time since it started: the idle timer starts
	}
	if afterQuiet {
		w.engine.kickPublisher() // a fleet's other Caddys learn of it at once (R5m, fleet.go)
	}
	return a.Learning(dial, now)
}

// Hold serves a request whose route has nothing routable: it wakes one
// instance (R5's order: one being woken, else the first on standby by
// name) and waits for the catalog to show a routable target, at most
// timeout. It returns the targets, or none and the Retry-After to answer
// with (0: no instance to wake, plain 503). A connection holds at most
// max_held requests and runs at most max_wakes wakes (R5d); a request
// beyond max_held, or beyond its client's share of it (an eighth, at
// least 4; the client is the one clients.With put in ctx, if any), is
// answered at once, one whose wake waits for a slot is held meanwhile. A wake that could not reach the Engine is tried again
// while the request is held (R5g); ctx is the request's: the hold ends with
// it.
func (w *Waker) Hold(ctx context.Context, route catalog.Route, host string, timeout time.Duration, dst []catalog.Target) ([]catalog.Target, time.Duration) {
	var timer, pause *time.Timer
	var wk *wake
	holding := false
	client, known := clients.From(ctx)
	defer func() {
		if holding {
			w.letGo(client, known)
		}
		if timer != nil {
			timer.Stop()
		}
		if pause != nil {
			pause.Stop()
		}
	}()
	var paused <-chan time.Time // set while waiting to retry an unreachable Engine
	var grace *time.Timer
	var catchUp <-chan time.Time // set while waiting for the catalog to follow a removal
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		snap := w.catalog.Snapshot()
		if targets := snap.Targets(dst[:0], route, host); len(targets) > 0 {
			return targets, 0
		}
		var slot <-chan struct{} // set while waiting for a wake slot
		if wk == nil && paused == nil {
			var retry time.Duration
			wk, retry, slot = w.wakeFor(snap, route, host)
			if wk == nil && slot == nil && catchUp == nil {
				return nil, retry
			}
			if !holding {
				if !w.holdOne(client, known) {
					return nil, retryAfterBusy
				}
				holding = true
			}
			if timer == nil {
				timer = time.NewTimer(timeout)
			}
		}
		var done chan struct{}
		if wk != nil {
			done = wk.done
		}
		select {
		case <-snap.Changed():
		case <-slot:
		case <-paused:
			paused = nil
		case <-catchUp:
			catchUp = nil // the next look answers, woken or not
		case <-done:
			switch wk.result {
			case WakeReady:
			case WakeGone:
				// Removed: wake another, or wait a moment for the catalog
				// to have the removal and any container replacing it.
				if grace == nil {
					grace = time.NewTimer(goneGrace)
					catchUp = grace.C
				}
			case WakeUnreachable:
				if pause == nil {
					pause = time.NewTimer(unreachableRetry)
				} else {
					pause.Reset(unreachableRetry)
				}
				paused = pause.C
			default:
				return nil, w.retryAfter(wk.id)
			}
			wk = nil // ready: the next snapshot has it (or another wake)
		case <-timer.C:
			if paused != nil {
				return nil, retryAfterUnreachable
			}
			return nil, retryAfterWaking
		case <-ctx.Done():
			return nil, retryAfterWaking
		}
	}
}

// holdOne counts a held request, if fewer than max_held are and its
// client (if known) holds less than its share; the first refusal under
// max_held is logged, and again once half as many were held since; a
// refusal under a client's share only at debug level (one client's
// doing).
func (w *Waker) holdOne(client netip.Prefix, known bool) bool {
	n := w.held.Add(1)
	if n <= int64(w.maxHeld) {
		if known && !w.shares.Take(client) {
			w.held.Add(-1)
			w.logger.Debug("a client holds its share of max_held requests already; 503 with Retry-After",
				zap.String("client", client.String()), zap.Int("share", w.shares.Limit()))
			return false
		}
		if n <= int64(w.maxHeld/2) {
			w.heldFull.Store(false)
		}
		return true
	}
	w.held.Add(-1)
	if w.heldFull.CompareAndSwap(false, true) {
		w.logger.Warn("max_held requests are waiting for wakes already; further requests get 503 with Retry-After until some are answered",
			zap.Int("max_held", w.maxHeld), zap.Duration("retry_after", retryAfterBusy))
	}
	return false
}

// letGo gives back what holdOne counted.
func (w *Waker) letGo(client netip.Prefix, known bool) {
	w.held.Add(-1)
	if known {
		w.shares.Give(client)
	}
}

// wakeFor picks the instance to wake for a request and returns its wake,
// joining one in progress; nil and a Retry-After when every candidate is
// failing, nil and 0 when there is none; nil and slot when the
// connection runs max_wakes wakes already: slot is closed when one ends.
func (w *Waker) wakeFor(snap *catalog.Snapshot, route catalog.Route, host string) (*wake, time.Duration, <-chan struct{}) {
	var buf [4]catalog.WakeCandidate
	cands := snap.WakeCandidates(buf[:0], route, host)
	if len(cands) == 0 {
		return nil, 0, nil
	}
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.closed {
		return nil, 0, nil
	}
	for _, c := range cands {
		if wk := e.wakes[c.ID]; wk != nil {
			return wk, 0, nil // being woken already
		}
	}
	if w.catalog.Snapshot() != snap {
		// snap is older than the catalog: a wake may have ended since,
		// with its instance ready in a later snapshot. Look again there
		// rather than start it a second time (snap's Changed is closed:
		// the request tries again at once).
		return nil, 0, snap.Changed()
	}
	var retry time.Duration
	now := w.now()
	for _, c := range cands {
		if f := e.failures[c.ID]; f != nil && now.Before(f.after) {
			if !f.gone && (retry == 0 || f.after.Sub(now) < retry) {
				retry = f.after.Sub(now)
			}
			continue
		}
		if w.running >= w.maxWakes {
			return nil, 0, w.freed
		}
		return w.startLocked(c, CauseRequest, nil), 0, nil
	}
	return nil, retry, nil
}

// engineUnreachable reports an error that says the Engine could not be
// reached or did not answer (R5g): the connection failed, was refused or
// reset, ended early, or timed out. An answer of the Engine's (a status
// with a message) is none.
func (w *Waker) engineUnreachable(err error) bool {
	var ne net.Error
	return w.engine.actions.Unreachable(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, context.DeadlineExceeded)
}

// run makes the one Engine call of a wake (start, or unpause; none for an
// instance already on its way up) and waits until the instance is
// routable or the wake failed.
func (w *Waker) run(wk *wake, c catalog.WakeCandidate) {
	if c.State == catalog.StateStopping {
		// Being put on standby: wake it once it is down.
		if c.State = w.settled(c.ID); c.State == catalog.StateUnknown {
			w.finish(wk, WakeCanceled, nil)
			return
		}
	}
	w.wakeDependencies(wk) // first, and ready (R5k)
	// What the catalog learns of the instance from now on is of after the
	// call: a stopped instance then is one that exited.
	before := w.catalog.Seq()
	var err error
	ctx, cancel := context.WithTimeout(w.ctx, actionTimeout)
	switch c.State {
	case catalog.StateStopped:
		err = w.engine.actions.Start(ctx, c.ID, c.Labels)
	case catalog.StatePaused:
		err = w.engine.actions.Unpause(ctx, c.ID, c.Labels)
	}
	cancel()
	switch {
	case err != nil && w.engine.actions.Denied(err):
		w.finish(wk, WakeDenied, err)
		return
	case err != nil && w.engine.actions.Gone(err):
		w.finish(wk, WakeGone, err)
		return
	case err != nil && w.ctx.Err() != nil:
		w.finish(wk, WakeCanceled, err)
		return
	case err != nil && w.engineUnreachable(err):
		w.finish(wk, WakeUnreachable, err)
		return
	case err != nil:
		w.finish(wk, WakeError, err)
		return
	}
	w.finish(wk, w.watch(c.ID, c.State, before), nil)
}

// watch waits for the woken instance (from state was) to be routable:
// ready, or exited if, after the wake's call (past the catalog's Seq
// before), it is restarting or dead, or it stopped after it started (the
// events' order, since a description fetched for an older event may come
// after the start), or, unpaused, it is described stopped.
func (w *Waker) watch(id string, was catalog.State, before uint64) WakeResult {
	deadline := time.NewTimer(wakeWatch)
	defer deadline.Stop()
	for {
		snap := w.catalog.Snapshot()
		s, ok := w.sleeper(id)
		switch {
		case !ok:
			return WakeExited // removed
		case s.Ready:
			return WakeReady
		case s.State == catalog.StateRestarting || s.State == catalog.StateFailed:
			return WakeExited
		case was == catalog.StateStopped && s.StartEvent > before && s.StopEvent > s.StartEvent:
			return WakeExited
		case was == catalog.StatePaused && s.Seq > before && s.State == catalog.StateStopped:
			return WakeExited
		case was != catalog.StateStopped && was != catalog.StatePaused && s.StopEvent > before:
			return WakeExited // it was on its way up, and went down
		}
		select {
		case <-snap.Changed():
		case <-deadline.C:
			return WakeTooSlow
		case <-w.ctx.Done():
			return WakeCanceled
		}
	}
}

// settled waits until the instance, being put on standby, is down, and
// returns its state then (StateUnknown: gone, or the wait ended).
func (w *Waker) settled(id string) catalog.State {
	deadline := time.NewTimer(wakeWatch)
	defer deadline.Stop()
	for {
		snap := w.catalog.Snapshot()
		s, ok := w.sleeper(id)
		switch {
		case !ok:
			return catalog.StateUnknown
		case s.State != catalog.StateStopping:
			return s.State
		}
		select {
		case <-snap.Changed():
		case <-deadline.C:
			return catalog.StateUnknown
		case <-w.ctx.Done():
			return catalog.StateUnknown
		}
	}
}

// sleeper is the catalog's current view of one labelled instance.
func (w *Waker) sleeper(id string) (catalog.Sleeper, bool) {
	return w.catalog.Sleeper(id)
}

// freeSlotLocked frees one slot of max_wakes and tells those waiting for
// one. engine.mu is held.
func (w *Waker) freeSlotLocked() {
	w.running--
	close(w.freed)
	w.freed = make(chan struct{})
}

// finish is where a wake's result is known: it ends the wake, frees its
// slot, records a failure of the container's (it is not woken again for a
// while, so a broken container is never woken in a loop; an Engine that
// could not be reached is none, R5g), logs, and releases the requests
// held on it.
func (w *Waker) finish(wk *wake, result WakeResult, err error) {
	e := w.engine
	e.mu.Lock()
	delete(e.wakes, wk.id)
	e.waking.CompareAndDelete(wk.id, wk)
	if !wk.slotless {
		w.freeSlotLocked()
	}
	var backoff time.Duration
	firstDenial := false
	switch result {
	case WakeReady:
		delete(e.failures, wk.id)
		if wk.activity.Touch(w.now()) { // this Caddy woke it: its idle time counts
			defer w.touch(wk.activity)
		}
	case WakeCanceled, WakeUnreachable:
	case WakeGone:
		// Not woken again, and no failure of a container's to back off
		// from: forgetFailures drops it once the catalog has the removal.
		e.failures[wk.id] = &failure{after: w.now().Add(maxBackoff), gone: true}
	default:
		f := e.failures[wk.id]
		if f == nil {
			f = &failure{}
			e.failures[wk.id] = f
		}
		f.count++
		backoff = min(firstBackoff<<(f.count-1), maxBackoff)
		if f.count > 6 {
			backoff = maxBackoff
		}
		f.after = w.now().Add(backoff)
		if result == WakeDenied {
			firstDenial, e.denied = !e.denied, true
		}
	}
	wk.result = result
	e.mu.Unlock()
	defer close(wk.done) // after the log line: whoever waits on it sees it written
	if w.counted != nil {
		w.counted(result)
	}

	fields := []zap.Field{zap.String("instance", wk.name), zap.String("result", string(result))}
	switch {
	case result == WakeReady:
		w.logger.Info("woke instance", fields...)
	case result == WakeDenied && !firstDenial:
		// Said once per Engine: a read-only socket refuses every wake.
	case result == WakeDenied:
		w.logger.Error("cannot wake instance: the Engine refuses this client the write "+
			"(a read-only socket or a socket proxy that denies POST /containers/{id}/start, /stop, /pause, /unpause); "+
			"requests for instances on standby get 503", append(fields, zap.Duration("retry_after", backoff), zap.Error(err))...)
	case result == WakeCanceled:
	case result == WakeGone:
		w.logger.Info("instance to wake is gone: the Engine removed it before Caddy heard so; waking another, if one is on standby",
			append(fields, zap.Error(err))...)
	case result == WakeUnreachable:
		w.logger.Warn("cannot wake instance: the Engine could not be reached; the next request tries again",
			append(fields, zap.Error(err))...)
	default:
		w.logger.Warn("wake failed; not waking this instance again until retry_after has passed",
			append(fields, zap.Duration("retry_after", backoff), zap.Error(err))...)
	}
}

// retryAfter is how long until the instance may be woken again.
func (w *Waker) retryAfter(id string) time.Duration {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.failures[id]; f != nil {
		if d := f.after.Sub(w.now()); d > 0 {
			return d
		}
	}
	return retryAfterWaking
}

// WakeBackoff is, for the admin API, when the instance may be woken again
// after its last wakes failed and how many failed in a row (zero time:
// it may be woken now), and whether a wake of it is in progress.
func (w *Waker) WakeBackoff(id string) (after time.Time, failures int, waking bool) {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.failures[id]; f != nil && !f.gone && w.now().Before(f.after) {
		after, failures = f.after, f.count
	}
	return after, failures, e.wakes[id] != nil
}
