package caddydicer

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Scale to zero on a daemon that cannot wake on connect (Docker): Caddy
// itself wakes a container labelled caddy.standby_after when a request
// finds its route with nothing routable, holds the request until the
// catalog shows the container ready, and puts the container on standby
// (stop or pause) once no request went through this Caddy for
// standby_after and none is in flight (reverse_proxy's own count).

// standbyActions are the writes a connection may make to its daemon; the
// adapter refuses them for an instance without the label.
type standbyActions interface {
	Start(ctx context.Context, id string, labels map[string]string) error
	Stop(ctx context.Context, id string, labels map[string]string) error
	Pause(ctx context.Context, id string, labels map[string]string) error
	Unpause(ctx context.Context, id string, labels map[string]string) error
	// Denied reports an error that says the daemon refuses this client the
	// write (a read-only socket): retrying cannot help.
	Denied(err error) bool
	Close() error
}

const (
	// defaultWakeTimeout is the wake_timeout setting's default.
	defaultWakeTimeout = 30 * time.Second
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
)

// wakeResult is how a wake ended.
type wakeResult string

const (
	wakeReady    wakeResult = "ready"    // the container became routable
	wakeExited   wakeResult = "exited"   // it stopped again before it was ready
	wakeDenied   wakeResult = "denied"   // the daemon refused the write
	wakeError    wakeResult = "error"    // the write failed otherwise
	wakeTooSlow  wakeResult = "too_slow" // not routable within wakeWatch
	wakeCanceled wakeResult = "canceled" // the connection closed meanwhile
)

// standby is one connection's scale to zero: wakes in progress, failed
// wakes, the idle timer, and the stand-in upstreams that answer 503 with
// Retry-After.
type standby struct {
	// counted, if set, hears each wake's result (the wakes metric).
	counted func(wakeResult)

	actions standbyActions
	catalog *catalog.Catalog
	logger  *zap.Logger
	ctx     context.Context
	wg      sync.WaitGroup

	mu       sync.Mutex
	wakes    map[string]*wake    // by instance ID, in progress
	failures map[string]*failure // by instance ID, the last wakes failed
	standIns map[int]*standIn    // by Retry-After seconds
	denied   bool                // a write was refused once (logged once)
	acting   map[string]bool     // IDs being put on standby
	kicks    chan struct{}       // tells idleLoop of an instance served for the first time
	closed   bool                // the connection is closing
}

// kick tells idleLoop to look again, without waiting.
func (w *standby) kick() {
	select {
	case w.kicks <- struct{}{}:
	default:
	}
}

// wake is one wake in progress: the start or unpause call, then the wait
// until the container is routable.
type wake struct {
	id, name string
	activity *catalog.Activity
	done     chan struct{} // closed with result set
	result   wakeResult
}

// failure is a container not to wake again until after.
type failure struct {
	count int
	after time.Time
}

func newStandby(ctx context.Context, actions standbyActions, cat *catalog.Catalog, logger *zap.Logger) *standby {
	w := &standby{
		actions: actions, catalog: cat, logger: logger, ctx: ctx,
		wakes: map[string]*wake{}, failures: map[string]*failure{},
		standIns: map[int]*standIn{}, acting: map[string]bool{}, kicks: make(chan struct{}, 1),
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.idleLoop()
	}()
	return w
}

// close waits for the goroutines (ctx is done) and shuts the stand-ins.
func (w *standby) close() {
	w.mu.Lock()
	w.closed = true // no more wakes nor stand-ins
	w.mu.Unlock()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.standIns {
		_ = s.srv.Close()
	}
	_ = w.actions.Close()
}

// record notes a request routed to a labelled instance: now, and, once per
// dial address, reverse_proxy's in-flight counter for it, known when the
// request ends (see hostOf). Atomics only on the request path, no lock.
func (w *standby) record(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	if a.Touch(time.Now()) {
		w.kick() // served for the first time since it started: the idle timer starts
	}
	if a.Knows(u.Dial) {
		return
	}
	a.Begin()
	ctx := r.Context()
	context.AfterFunc(ctx, func() { a.Learn(u.Dial, hostOf(ctx, u)) })
}

// hostOf returns reverse_proxy's Host of u, the in-flight counter it
// shares with every upstream of the same dial address, or nil if it was
// not filled in. reverse_proxy fills it in after GetUpstreams, then sets
// the http.reverse_proxy.upstream.* placeholders under the replacer's
// lock: finding them set orders that write before this read.
func hostOf(ctx context.Context, u *reverseproxy.Upstream) catalog.InFlight {
	repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return nil
	}
	if _, set := repl.Get("http.reverse_proxy.upstream.hostport"); !set || u.Host == nil {
		return nil
	}
	return u.Host
}

// hold serves a request whose route has nothing routable: it wakes one
// instance (R5's order: one being woken, else the first on standby by
// name) and waits for the catalog to show a routable target, at most
// timeout. It returns the targets, or none and the Retry-After to answer
// with (0: no instance to wake, plain 503).
func (w *standby) hold(r *http.Request, route catalog.Route, host string, timeout time.Duration, dst []catalog.Target) ([]catalog.Target, time.Duration) {
	var timer *time.Timer
	var wk *wake
	for {
		snap := w.catalog.Snapshot()
		if targets := snap.Targets(dst[:0], route, host); len(targets) > 0 {
			return targets, 0
		}
		if wk == nil {
			var retry time.Duration
			if wk, retry = w.wakeFor(snap, route, host); wk == nil {
				return nil, retry
			}
			if timer == nil {
				timer = time.NewTimer(timeout)
				defer timer.Stop()
			}
		}
		select {
		case <-snap.Changed():
		case <-wk.done:
			if wk.result != wakeReady {
				return nil, w.retryAfter(wk.id)
			}
			wk = nil // ready: the next snapshot has it (or another wake)
		case <-timer.C:
			return nil, retryAfterWaking
		case <-r.Context().Done():
			return nil, retryAfterWaking
		}
	}
}

// wakeFor picks the instance to wake for a request and returns its wake,
// joining one in progress; nil and a Retry-After when every candidate is
// failing, nil and 0 when there is none.
func (w *standby) wakeFor(snap *catalog.Snapshot, route catalog.Route, host string) (*wake, time.Duration) {
	var buf [4]catalog.WakeCandidate
	cands := snap.WakeCandidates(buf[:0], route, host)
	if len(cands) == 0 {
		return nil, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, 0
	}
	for _, c := range cands {
		if wk := w.wakes[c.ID]; wk != nil {
			return wk, 0 // being woken already
		}
	}
	var retry time.Duration
	now := time.Now()
	for _, c := range cands {
		if f := w.failures[c.ID]; f != nil && now.Before(f.after) {
			if retry == 0 || f.after.Sub(now) < retry {
				retry = f.after.Sub(now)
			}
			continue
		}
		wk := &wake{id: c.ID, name: c.Name, activity: c.Activity, done: make(chan struct{})}
		c.Activity.Forget() // its addresses may change
		w.wakes[c.ID] = wk
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(wk, c)
		}()
		return wk, 0
	}
	return nil, retry
}

// run makes the one Engine call of a wake (start, or unpause; none for an
// instance already on its way up) and waits until the instance is
// routable or the wake failed.
func (w *standby) run(wk *wake, c catalog.WakeCandidate) {
	if c.State == catalog.StateStopping {
		// Being put on standby: wake it once it is down.
		if c.State = w.settled(c.ID); c.State == catalog.StateUnknown {
			w.finish(wk, wakeCanceled, nil)
			return
		}
	}
	// What the catalog learns of the instance from now on is of after the
	// call: a stopped instance then is one that exited.
	before := w.catalog.Seq()
	var err error
	ctx, cancel := context.WithTimeout(w.ctx, actionTimeout)
	switch c.State {
	case catalog.StateStopped:
		err = w.actions.Start(ctx, c.ID, c.Labels)
	case catalog.StatePaused:
		err = w.actions.Unpause(ctx, c.ID, c.Labels)
	}
	cancel()
	switch {
	case err != nil && w.actions.Denied(err):
		w.finish(wk, wakeDenied, err)
		return
	case err != nil && w.ctx.Err() != nil:
		w.finish(wk, wakeCanceled, err)
		return
	case err != nil:
		w.finish(wk, wakeError, err)
		return
	}
	w.finish(wk, w.watch(c.ID, c.State, before), nil)
}

// watch waits for the woken instance (from state was) to be routable:
// ready, or exited if, after the wake's call (past the catalog's Seq
// before), it is restarting or dead, or it stopped after it started (the
// events' order, since a description fetched for an older event may come
// after the start), or, unpaused, it is described stopped.
func (w *standby) watch(id string, was catalog.State, before uint64) wakeResult {
	deadline := time.NewTimer(wakeWatch)
	defer deadline.Stop()
	for {
		snap := w.catalog.Snapshot()
		s, ok := w.sleeper(id)
		switch {
		case !ok:
			return wakeExited // removed
		case s.Ready:
			return wakeReady
		case s.State == catalog.StateRestarting || s.State == catalog.StateFailed:
			return wakeExited
		case was == catalog.StateStopped && s.StartEvent > before && s.StopEvent > s.StartEvent:
			return wakeExited
		case was == catalog.StatePaused && s.Seq > before && s.State == catalog.StateStopped:
			return wakeExited
		case was != catalog.StateStopped && was != catalog.StatePaused && s.StopEvent > before:
			return wakeExited // it was on its way up, and went down
		}
		select {
		case <-snap.Changed():
		case <-deadline.C:
			return wakeTooSlow
		case <-w.ctx.Done():
			return wakeCanceled
		}
	}
}

// settled waits until the instance, being put on standby, is down, and
// returns its state then (StateUnknown: gone, or the wait ended).
func (w *standby) settled(id string) catalog.State {
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
func (w *standby) sleeper(id string) (catalog.Sleeper, bool) {
	for _, s := range w.catalog.Sleepers(nil) {
		if s.ID == id {
			return s, true
		}
	}
	return catalog.Sleeper{}, false
}

// finish is where a wake's result is known: it ends the wake, records a
// failure (the instance is not woken again for a while, so a broken
// container is never woken in a loop), logs, and releases the requests
// held on it.
func (w *standby) finish(wk *wake, result wakeResult, err error) {
	w.mu.Lock()
	delete(w.wakes, wk.id)
	var backoff time.Duration
	firstDenial := false
	if result == wakeReady {
		delete(w.failures, wk.id)
		if wk.activity.Touch(time.Now()) { // this Caddy woke it: its idle time counts
			defer w.kick()
		}
	} else if result != wakeCanceled {
		f := w.failures[wk.id]
		if f == nil {
			f = &failure{}
			w.failures[wk.id] = f
		}
		f.count++
		backoff = min(firstBackoff<<(f.count-1), maxBackoff)
		if f.count > 6 {
			backoff = maxBackoff
		}
		f.after = time.Now().Add(backoff)
		if result == wakeDenied {
			firstDenial, w.denied = !w.denied, true
		}
	}
	wk.result = result
	w.mu.Unlock()
	defer close(wk.done) // after the log line: whoever waits on it sees it written
	if w.counted != nil {
		w.counted(result)
	}

	fields := []zap.Field{zap.String("instance", wk.name), zap.String("result", string(result))}
	switch {
	case result == wakeReady:
		w.logger.Info("woke instance", fields...)
	case result == wakeDenied && !firstDenial:
		// Said once per connection: a read-only socket refuses every wake.
	case result == wakeDenied:
		w.logger.Error("cannot wake instance: the Engine refuses this client the write "+
			"(a read-only socket or a socket proxy that denies POST /containers/{id}/start, /stop, /pause, /unpause); "+
			"requests for instances on standby get 503", append(fields, zap.Duration("retry_after", backoff), zap.Error(err))...)
	case result == wakeCanceled:
	default:
		w.logger.Warn("wake failed; not waking this instance again until retry_after has passed",
			append(fields, zap.Duration("retry_after", backoff), zap.Error(err))...)
	}
}

// retryAfter is how long until the instance may be woken again.
func (w *standby) retryAfter(id string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.failures[id]; f != nil {
		if d := time.Until(f.after); d > 0 {
			return d
		}
	}
	return retryAfterWaking
}

// wakeBackoff is, for the admin API, when the instance may be woken again
// after its last wakes failed and how many failed in a row (zero time:
// it may be woken now), and whether a wake of it is in progress.
func (w *standby) wakeBackoff(id string) (after time.Time, failures int, waking bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.failures[id]; f != nil && time.Now().Before(f.after) {
		after, failures = f.after, f.count
	}
	return after, failures, w.wakes[id] != nil
}
