package standby

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

// idleLoop puts labelled instances on standby once idle: no request
// routed to them through this Caddy for their standby_after, and none in
// flight. Each instance has its own deadline, kept in a queue by time
// (R5l): the loop wakes at the earliest one and looks at the instances
// due then only; a change in the catalog makes it look at the instances
// that changed only, as does an instance served for the first time since
// it started. An instance's requests move its deadline lazily: when it
// comes, the loop sees the later request and sets the next one. It never
// asks the daemon, and thousands of instances asleep cost it nothing.
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
	q := newIdleQueue()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	changes := w.catalog.SleeperChanges()
	var batch []catalog.SleeperChange
	var touched []*catalog.Activity
	for {
		now := w.now()
		q.newPass()
		batch = w.catalog.TakeSleeperChanges(batch[:0])
		if len(batch) > 0 {
			w.apply(q, batch, now)
		}
		if cap(batch) > bigBuffer {
			batch = nil // a re-listing's would stay
		}
		touched = w.takeTouched(touched[:0])
		for _, a := range touched {
			if it := q.byAct[a]; it != nil {
				w.consider(q, it, now)
			}
		}
		if cap(touched) > bigBuffer {
			touched = nil
		}
		for it := q.peek(); it != nil && !now.Before(it.due); it = q.peek() {
			q.unschedule(it)
			w.consider(q, it, now)
		}
		next := time.Hour
		if it := q.peek(); it != nil {
			next = it.due.Sub(w.now())
		}
		timer.Reset(next)
		select {
		case <-changes:
		case <-w.kicks:
		case <-timer.C:
		case <-w.ctx.Done():
			return
		}
	}
}

// apply takes the catalog's changes of instances into the queue: each
// changed one is linked (or unlinked, gone) and looked at again; a change
// of an instance that depends on others looks again at those held up by
// their dependents (R5k).
func (w *Waker) apply(q *idleQueue, batch []catalog.SleeperChange, now time.Time) {
	dependents, gone := false, false
	for _, ch := range batch {
		if _, was := q.dependents[ch.ID]; was || ch.Dependent != nil {
			dependents = true
		}
		if ch.Dependent != nil {
			q.dependents[ch.ID] = *ch.Dependent
		} else {
			delete(q.dependents, ch.ID)
		}
		if !ch.IsSleeper {
			if it := q.byID[ch.ID]; it != nil {
				q.drop(it)
				w.unlink(ch.ID)
				w.engine.noteGone(ch.ID)
				gone = true
			}
			continue
		}
		it := q.byID[ch.ID]
		if it == nil {
			it = q.add(ch.Sleeper)
		} else {
			q.update(it, ch.Sleeper)
		}
		w.linkOne(ch.Sleeper)
		w.consider(q, it, now)
	}
	if dependents {
		// consider deletes from q.held and may add back: not while ranging
		// over it.
		held := make([]*idleItem, 0, len(q.held))
		for _, it := range q.held {
			held = append(held, it)
		}
		for _, it := range held {
			w.consider(q, it, now)
		}
	}
	if gone {
		w.forgetFailures()
	}
}

// consider looks at one instance now and sets when to look again, if
// ever: it is put on standby when due, idle and depended on by no
// instance up.
func (w *Waker) consider(q *idleQueue, it *idleItem, now time.Time) {
	q.unschedule(it)
	delete(q.held, it.s.ID)
	s := it.s
	if s.Policy.After == 0 {
		return // counted for its caddy.soft_limit only (R5j)
	}
	if s.State != catalog.StateRunning && s.State != catalog.StateStarting {
		s.Activity.Reset()
		it.busy = time.Time{}
		return
	}
	last := s.Activity.Last()
	if !s.Ready || last.IsZero() {
		return // not up yet, or not served by this Caddy since it was down: a change or its first request
	}
	if s.Activity.InFlight() > 0 {
		it.busy = now
		q.schedule(it, now.Add(busyRecheck(s.Policy.After)))
		return
	}
	idleSince := last
	if it.busy.After(idleSince) {
		idleSince = it.busy
	}
	if due := idleSince.Add(s.Policy.After); now.Before(due) {
		q.schedule(it, due)
		return
	}
	if w.dependedOn(q, s) {
		q.held[s.ID] = it // looked at again when a dependent changes (R5k)
		return
	}
	if until := w.engine.heldUntil(s.ID); now.Before(until) {
		q.schedule(it, until) // another Caddy of the fleet keeps it awake (R5m)
		return
	}
	if s.Policy.CPU > 0 {
		if until := w.engine.cpuHeldUntil(s.ID); now.Before(until) {
			q.schedule(it, until) // its CPU keeps it awake (R5r, cpu.go)
			return
		}
	}
	w.putOnStandby(s, idleSince)
	// Looked at again in a while, in case it is still up then (a request
	// came meanwhile, or the call failed); the catalog's change of it
	// comes first if it goes down.
	q.schedule(it, now.Add(busyRecheck(s.Policy.After)))
}

// busyRecheck is how often an instance with requests in flight is looked
// at again: a quarter of its standby_after, between 100 ms and 10 s, so
// that its idle time counts from within that of its last request's end.
func busyRecheck(after time.Duration) time.Duration {
	return min(max(after/4, 100*time.Millisecond), 10*time.Second)
}

// linkOne links the Activity of one of the catalog's labelled instances
// to the engine's shared one for its ID (made for the first connection
// that sees it).
func (w *Waker) linkOne(s catalog.Sleeper) {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	old := w.linked[s.ID]
	if old == s.Activity {
		if sa := e.shared[s.ID]; sa != nil {
			sa.after, sa.pool = s.Policy.After, inPool(s) // its labels changed
		}
		return
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
	sa.after, sa.pool = s.Policy.After, inPool(s)
	s.Activity.Link(sa.act)
	w.linked[s.ID] = s.Activity
	if !s.Activity.Last().IsZero() {
		e.kickPublisher() // used before it was linked: its lease at once (R5m)
	}
}

// inPool reports whether s is labelled caddy.soft_limit (R5j).
func inPool(s catalog.Sleeper) bool {
	_, ok := s.Labels[catalog.LabelSoftLimit]
	return ok
}

// unlink undoes linkOne for an instance the catalog no longer has.
func (w *Waker) unlink(id string) {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := w.linked[id]; a != nil {
		e.unlinkLocked(id, a)
		delete(w.linked, id)
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

// noteGone tells the publisher that a catalog dropped the instance id
// (R5m): if no connection links it any more, its lease folder goes at the
// publisher's next look. At most maxGone wait; past that, only this
// Caddy's lease goes.
func (e *Engine) noteGone(id string) {
	if st := e.fleet.Load(); st == nil || !st.fleet.Shared() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shared[id] != nil {
		return
	}
	if e.gone == nil {
		e.gone = map[string]struct{}{}
	}
	if len(e.gone) < maxGone {
		e.gone[id] = struct{}{}
	}
}

// maxGone bounds the gone instances the publisher has yet to look at.
const maxGone = 10000

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

// maxStandbyCalls bounds the stop and pause calls a connection has in
// flight (R5l): thousands of instances due at once are put on standby by
// a few workers in turn, not by a goroutine each contending for the
// catalogs and the Engine.
const maxStandbyCalls = 16

// standbyJob is an instance to put on standby: its view when it was due,
// its last request then, and when it became idle.
type standbyJob struct {
	s               catalog.Sleeper
	last, idleSince time.Time
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
	e.actingPeak = max(e.actingPeak, len(e.acting))
	e.mu.Unlock()
	w.jobsMu.Lock()
	defer w.jobsMu.Unlock()
	w.jobs = append(w.jobs, standbyJob{s: s, last: s.Activity.Last(), idleSince: idleSince})
	if w.jobWorkers < maxStandbyCalls {
		w.jobWorkers++
		w.wg.Add(1)
		go w.standbyWorker()
	}
}

// standbyWorker runs the jobs of putOnStandby, in order, until none is
// left.
func (w *Waker) standbyWorker() {
	defer w.wg.Done()
	for {
		w.jobsMu.Lock()
		if len(w.jobs) == 0 {
			w.jobWorkers--
			w.jobs = nil // its array may be large
			w.jobsMu.Unlock()
			return
		}
		job := w.jobs[0]
		w.jobs[0] = standbyJob{}
		w.jobs = w.jobs[1:]
		w.jobsMu.Unlock()
		w.standby(job)
	}
}

// bigBuffer is the size above which the idle machinery lets go of a
// buffer or map once done with it (many instances due together): kept,
// it would hold its largest size for good, per instance of a burst.
const bigBuffer = 1024

// releaseActing makes acting anew once it is empty after holding more
// than bigBuffer IDs; e.mu is held.
func (e *Engine) releaseActing() {
	if len(e.acting) == 0 && e.actingPeak > bigBuffer {
		e.acting, e.actingPeak = map[string]bool{}, 0
	}
}

// standby is one job of putOnStandby: the call, unless a request came
// since the instance was due.
func (w *Waker) standby(job standbyJob) {
	s, e := job.s, w.engine
	defer func() {
		e.mu.Lock()
		delete(e.acting, s.ID)
		e.releaseActing()
		e.mu.Unlock()
	}()
	if !s.Activity.Last().Equal(job.last) || s.Activity.InFlight() > 0 || w.ctx.Err() != nil {
		return // a request came meanwhile, or the connection is closing
	}
	ctx, cancel := context.WithTimeout(w.ctx, actionTimeout)
	defer cancel()
	if w.fleetHolds(ctx, s) {
		return // another Caddy of the fleet keeps it awake, or the fleet cannot tell (R5m)
	}
	if w.cpuKeepsAwake(ctx, job) {
		return // busy with no request open (R5r, cpu.go): looked at again later
	}
	if !s.Activity.Last().Equal(job.last) || s.Activity.InFlight() > 0 || w.ctx.Err() != nil {
		return // a request came during the read
	}
	action, call := "stop", e.actions.Stop
	if s.Policy.Pause {
		action, call = "pause", e.actions.Pause
	}
	idle := w.now().Sub(job.idleSince).Round(time.Millisecond)
	// Out of its rotations, in every connection's catalog, before the
	// call: no request may reach a container being frozen or drained;
	// one that comes meanwhile waits and wakes it once it is down.
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
	if w.events.Listens(lifecycle.Standby) { // R13e
		w.events.EmitID(lifecycle.Standby, s.ID, s.Name, map[string]any{"action": action,
			"idle_seconds": idle.Seconds(), "why": "idle for " + idle.String()})
	}
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
