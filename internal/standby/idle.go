package standby

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// idleLoop puts labelled instances on standby once idle: no request
// routed to them through this Caddy for their standby_after, and none in
// flight. It wakes at the earliest time one may be due, at each catalog
// change (an instance starts or stops), and when an instance is served
// for the first time since it started; it never asks the daemon.
//
// Activities are linked to the Engine's shared ones first (R5f): the
// idle time and requests in flight are those of every connection to the
// Engine, and times are on the monotonic clock, so a step of the wall
// clock never puts an instance on standby.
//
// Only an instance this Caddy routed a request to (or woke) since it last
// saw it down is ever put on standby by it: a container that another
// Caddy, or an operator, started and that this one never served is left
// running.
func (w *Waker) idleLoop() {
	busy := map[string]time.Time{} // ID -> when this loop last saw requests in flight
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var sleepers []catalog.Sleeper
	var dependents []catalog.Dependent
	for {
		changed := w.catalog.Snapshot().Changed()
		now := w.now()
		sleepers = w.catalog.Sleepers(sleepers[:0])
		w.link(sleepers)
		next := now.Add(time.Hour)
		seen := make(map[string]bool, len(sleepers))
		dependents = w.catalog.Dependents(dependents[:0]) // R5k
		for _, s := range sleepers {
			seen[s.ID] = true
			if s.Policy.After == 0 {
				continue // counted for its caddy.soft_limit only (R5j)
			}
			if s.State != catalog.StateRunning && s.State != catalog.StateStarting {
				s.Activity.Reset()
				delete(busy, s.ID)
				continue
			}
			last := s.Activity.Last()
			if !s.Ready || last.IsZero() {
				continue // not up yet, or not served by this Caddy since it was down
			}
			if s.Activity.InFlight() > 0 {
				busy[s.ID] = now
				next = earliest(next, now.Add(busyRecheck(s.Policy.After)))
				continue
			}
			idleSince := last
			if b := busy[s.ID]; b.After(idleSince) {
				idleSince = b
			}
			due := idleSince.Add(s.Policy.After)
			if now.Before(due) {
				next = earliest(next, due)
				continue
			}
			if dependedOn(s, dependents) {
				continue // looked at again when they change (R5k)
			}
			w.putOnStandby(s, idleSince)
		}
		for id := range busy {
			if !seen[id] {
				delete(busy, id)
			}
		}
		w.forgetFailures()
		timer.Reset(next.Sub(w.now()))
		select {
		case <-changed:
		case <-w.kicks:
		case <-timer.C:
		case <-w.ctx.Done():
			return
		}
	}
}

// busyRecheck is how often an instance with requests in flight is looked
// at again: a quarter of its standby_after, between 100 ms and 10 s, so
// that its idle time counts from within that of its last request's end.
func busyRecheck(after time.Duration) time.Duration {
	return min(max(after/4, 100*time.Millisecond), 10*time.Second)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// link links the Activity of each of the catalog's labelled instances to
// the engine's shared one for its ID (made for the first connection that
// sees it), and unlinks those of instances the catalog no longer has.
func (w *Waker) link(sleepers []catalog.Sleeper) {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[string]bool, len(sleepers))
	for _, s := range sleepers {
		seen[s.ID] = true
		old := w.linked[s.ID]
		if old == s.Activity {
			continue
		}
		if old != nil {
			e.unlinkLocked(s.ID, old)
		}
		sa := e.shared[s.ID]
		if sa == nil {
			sa = &sharedActivity{act: catalog.NewActivity()}
			e.shared[s.ID] = sa
		}
		sa.refs++
		s.Activity.Link(sa.act)
		w.linked[s.ID] = s.Activity
	}
	for id, a := range w.linked {
		if !seen[id] {
			e.unlinkLocked(id, a)
			delete(w.linked, id)
		}
	}
}

// unlinkLocked undoes one connection's link of a to the shared Activity
// of id, which goes once no connection links to it; e.mu is held.
func (e *Engine) unlinkLocked(id string, a *catalog.Activity) {
	a.Unlink()
	if sa := e.shared[id]; sa != nil {
		if sa.refs--; sa.refs <= 0 {
			delete(e.shared, id)
		}
	}
}

// catalogs are the catalogs of every connection to the Engine.
func (e *Engine) catalogs() []*catalog.Catalog {
	e.mu.Lock()
	defer e.mu.Unlock()
	cats := make([]*catalog.Catalog, 0, len(e.members))
	for m := range e.members {
		cats = append(cats, m.catalog)
	}
	return cats
}

// putOnStandby stops or pauses an idle instance, in the background, once
// at a time per instance whatever the connection; a failure is logged and
// retried at its next idle time only. idleSince is when its last request
// ended, as far as the loop saw (the log's idle counts from it, not from
// that request's start).
func (w *Waker) putOnStandby(s catalog.Sleeper, idleSince time.Time) {
	e := w.engine
	e.mu.Lock()
	if e.acting[s.ID] || e.wakes[s.ID] != nil {
		e.mu.Unlock()
		return
	}
	e.acting[s.ID] = true
	e.mu.Unlock()
	last := s.Activity.Last()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.acting, s.ID)
			e.mu.Unlock()
		}()
		if !s.Activity.Last().Equal(last) || s.Activity.InFlight() > 0 {
			return // a request came meanwhile
		}
		ctx, cancel := context.WithTimeout(w.ctx, actionTimeout)
		defer cancel()
		action, call := "stop", e.actions.Stop
		if s.Policy.Pause {
			action, call = "pause", e.actions.Pause
		}
		idle := w.now().Sub(idleSince).Round(time.Millisecond)
		// Out of its rotations, in every connection's catalog, before the
		// call: no request may reach a container being frozen or
		// drained; one that comes meanwhile waits and wakes it once it is
		// down.
		cats := e.catalogs()
		for _, c := range cats {
			c.StoppingBecause(s.ID, "idle for "+idle.String()+": Caddy puts it on standby ("+action+")")
		}
		if err := call(ctx, s.ID, s.Labels); err != nil {
			for _, c := range cats {
				c.CancelStopping(s.ID) // still up: back in its rotations
			}
			if w.ctx.Err() == nil {
				s.Activity.Touch(w.now()) // not again before standby_after
				if e.actions.Denied(err) && !e.firstDenial() {
					return // said once per Engine
				}
				w.logger.Warn("cannot put idle instance on standby", zap.String("instance", s.Name),
					zap.String("action", action), zap.Error(err))
			}
			return
		}
		w.logger.Info("instance on standby", zap.String("instance", s.Name), zap.String("action", action),
			zap.Duration("idle", idle))
	}()
}

// firstDenial records that the daemon refused a write, and reports
// whether it is the first time on this Engine.
func (e *Engine) firstDenial() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	first := !e.denied
	e.denied = true
	return first
}

// forgetFailures drops the failed wakes of instances no connection to the
// Engine has labelled any more (a container recreated by compose is a new
// one).
func (w *Waker) forgetFailures() {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.failures {
		if e.shared[id] == nil {
			delete(e.failures, id)
		}
	}
}
