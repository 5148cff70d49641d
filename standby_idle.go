package caddydicer

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// idleLoop puts labelled instances on standby once idle: no request
// routed to them through this Caddy for their standby_after, and none in
// flight. It wakes at the earliest time one may be due, and at each
// catalog change (an instance starts or stops); it never asks the daemon.
//
// Only an instance this Caddy routed a request to (or woke) since it last
// saw it start is ever put on standby by it: a container that another
// Caddy, or an operator, started and that this one never served is left
// running.
func (w *standby) idleLoop() {
	since := map[string]time.Time{} // ID -> when this loop first saw it running
	busy := map[string]time.Time{}  // ID -> when this loop last saw requests in flight
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
			if s.State != catalog.StateRunning {
				delete(since, s.ID)
				delete(busy, s.ID)
				continue
			}
			if _, ok := since[s.ID]; !ok {
				since[s.ID] = now
			}
			last := s.Activity.Last()
			if !s.Ready || last.Before(since[s.ID]) {
				continue // not up yet, or not served by this Caddy since it started
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
			w.putOnStandby(s)
		}
		for id := range since {
			if !seen[id] {
				delete(since, id)
				delete(busy, id)
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-changed:
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
// idle time only.
func (w *standby) putOnStandby(s catalog.Sleeper) {
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
		idle := time.Since(last).Round(time.Millisecond)
		if err := call(ctx, s.ID, s.Labels); err != nil {
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
