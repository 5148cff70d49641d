package caddydicer

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
// Only an instance this Caddy routed a request to (or woke) since it last
// saw it down is ever put on standby by it: a container that another
// Caddy, or an operator, started and that this one never served is left
// running.
func (w *standby) idleLoop() {
	busy := map[string]time.Time{} // ID -> when this loop last saw requests in flight
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var sleepers []catalog.Sleeper
	for {
		changed := w.catalog.Snapshot().Changed()
		now := time.Now()
		sleepers = w.catalog.Sleepers(sleepers[:0])
		next := now.Add(time.Hour)
		seen := make(map[string]bool, len(sleepers))
		for _, s := range sleepers {
			seen[s.ID] = true
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
			w.putOnStandby(s, idleSince)
		}
		for id := range busy {
			if !seen[id] {
				delete(busy, id)
			}
		}
		w.forgetFailures(seen)
		timer.Reset(time.Until(next))
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

// putOnStandby stops or pauses an idle instance, in the background, once
// at a time per instance; a failure is logged and retried at its next
// idle time only. idleSince is when its last request ended, as far as the
// loop saw (the log's idle counts from it, not from that request's start).
func (w *standby) putOnStandby(s catalog.Sleeper, idleSince time.Time) {
	w.mu.Lock()
	if w.acting[s.ID] || w.wakes[s.ID] != nil {
		w.mu.Unlock()
		return
	}
	w.acting[s.ID] = true
	w.mu.Unlock()
	last := s.Activity.Last()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			delete(w.acting, s.ID)
			w.mu.Unlock()
		}()
		if s.Activity.Last() != last || s.Activity.InFlight() > 0 {
			return // a request came meanwhile
		}
		ctx, cancel := context.WithTimeout(w.ctx, actionTimeout)
		defer cancel()
		action, call := "stop", w.actions.Stop
		if s.Policy.Pause {
			action, call = "pause", w.actions.Pause
		}
		idle := time.Since(idleSince).Round(time.Millisecond)
		// Out of its rotations before the call: no request may reach a
		// container being frozen or drained; one that comes meanwhile waits
		// and wakes it once it is down.
		w.catalog.StoppingBecause(s.ID, "idle for "+idle.String()+": Caddy puts it on standby ("+action+")")
		if err := call(ctx, s.ID, s.Labels); err != nil {
			w.catalog.CancelStopping(s.ID) // still up: back in its rotations
			if w.ctx.Err() == nil {
				s.Activity.Touch(time.Now()) // not again before standby_after
				if w.actions.Denied(err) && !w.firstDenial() {
					return // said once per connection
				}
				w.logger.Warn("cannot put idle instance on standby", zap.String("instance", s.Name),
					zap.String("action", action), zap.Error(err))
			}
			return
		}
		s.Activity.Forget()
		w.logger.Info("instance on standby", zap.String("instance", s.Name), zap.String("action", action),
			zap.Duration("idle", idle))
	}()
}

// firstDenial records that the daemon refused a write, and reports
// whether it is the first time on this connection.
func (w *standby) firstDenial() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := !w.denied
	w.denied = true
	return first
}

// forgetFailures drops the failed wakes of instances no longer labelled
// or no longer there (a container recreated by compose is a new one).
func (w *standby) forgetFailures(labelled map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.failures {
		if !labelled[id] {
			delete(w.failures, id)
		}
	}
}
