package standby

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

// Pools that grow under load (R5j) and dependencies woken first (R5k).

// WakeCause is why a wake started, as the caddy_dicer_wakes_started_total
// metric labels it (see Options.Started).
type WakeCause string

const (
	// CauseRequest: a request found nothing routable (R5).
	CauseRequest WakeCause = "request"
	// CauseLoad: every routable instance of the route was past its
	// caddy.soft_limit (R5j).
	CauseLoad WakeCause = "load"
	// CauseDependency: an instance being woken depends on it (R5k).
	CauseDependency WakeCause = "dependency"
	// CauseHello: a TLS ClientHello named a host the instance claims,
	// before any request (R5n, PreWake).
	CauseHello WakeCause = "client_hello"
)

// Grow wakes the next instance on standby of route for host (R5's order)
// when every one of targets, the route's routable instances, has more
// requests in flight than its caddy.soft_limit (R5j): one at a time (none
// while one of the route's wakeable instances is on its way up), in the
// background; the request goes on to targets. It reads atomics only
// unless the pool is loaded.
func (w *Waker) Grow(snap *catalog.Snapshot, route catalog.Route, host string, targets []catalog.Target) {
	if !catalog.Loaded(targets) {
		return
	}
	var buf [4]catalog.WakeCandidate
	cands := snap.WakeCandidates(buf[:0], route, host)
	if len(cands) == 0 {
		return
	}
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.closed || w.running >= w.maxWakes {
		return
	}
	now := w.now()
	var pick *catalog.WakeCandidate
	for i, c := range cands {
		if e.wakes[c.ID] != nil || c.State != catalog.StateStopped && c.State != catalog.StatePaused && c.State != catalog.StateStopping {
			return // one grows already
		}
		if f := e.failures[c.ID]; pick == nil && c.State != catalog.StateStopping && (f == nil || !now.Before(f.after)) {
			pick = &cands[i]
		}
	}
	if pick != nil {
		w.logger.Info("every routable instance is past its caddy.soft_limit: waking the next one on standby",
			zap.String("instance", pick.Name), zap.Int("routable", len(targets)))
		w.startLocked(*pick, CauseLoad, nil)
	}
}

// startLocked starts the wake of c for cause; chain is the instances
// whose wake waits on this one (R5k). e.mu is held.
func (w *Waker) startLocked(c catalog.WakeCandidate, cause WakeCause, chain []string) *wake {
	e := w.engine
	wk := &wake{id: c.ID, name: c.Name, activity: c.Activity, owner: w, done: make(chan struct{}), chain: chain}
	c.Activity.Forget() // its addresses may change
	e.wakes[c.ID] = wk
	e.waking.Store(c.ID, wk)
	w.running++
	if w.started != nil {
		w.started(cause)
	}
	if w.events.Listens(lifecycle.Waking) { // R13e: queued, never waited on under e.mu
		w.events.EmitID(lifecycle.Waking, c.ID, c.Name, map[string]any{"cause": string(cause)})
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run(wk, c)
	}()
	return wk
}

// Waking reports whether a wake of the instance id is in progress (its
// start call made or to be made, and not routable yet), whatever its
// cause: its readiness probe may take the fast path (R5j). It takes no
// lock: the catalog calls it with its own held.
func (w *Waker) Waking(id string) bool {
	_, ok := w.engine.waking.Load(id)
	return ok
}

// wakeDependencies wakes, before wk's instance, the instances its
// caddy.depends_on makes its dependencies (R5k: in its scope, at most
// catalog.MaxDependencies, a warning once beyond), and waits until they
// are ready or their wakes ended. Their wakes count under max_wakes like
// any other (R5d): each waits for a slot, in name order, while wk gives
// its own back until they are done, so a chain never holds every slot
// waiting on itself. A dependency that depends, through its own labels,
// on the instance being woken is a cycle: warned once per pair, and not
// waited for. One that Caddy does not wake (no caddy.standby_after) is
// waited for only while it runs.
func (w *Waker) wakeDependencies(wk *wake) {
	deps, matched := w.catalog.DependenciesOf(wk.id)
	if matched > len(deps) {
		w.warnOnce("cap\x00"+wk.id, "caddy.depends_on matches more instances than a wake follows: only the first ones by name are woken for it",
			zap.String("instance", wk.name), zap.Int("matched", matched), zap.Int("woken_at_most", catalog.MaxDependencies))
	}
	chain := append(slices.Clip(wk.chain), wk.id)
	var todo []catalog.Dependency
	var others []string
	for _, d := range deps {
		switch {
		case d.Ready:
		case d.Cycle || slices.Contains(chain, d.ID):
			w.warnOnce("cycle\x00"+min(wk.name, d.Name)+"\x00"+max(wk.name, d.Name),
				"caddy.depends_on makes a cycle: neither instance is woken for the other",
				zap.String("instance", wk.name), zap.String("depends_on", d.Name))
		case len(chain) >= catalog.MaxDependencyDepth:
		case !d.Wakeable:
			if d.State == catalog.StateRunning || d.State == catalog.StateStarting {
				others = append(others, d.ID)
			}
		default:
			todo = append(todo, d)
		}
	}
	deadline := time.NewTimer(wakeWatch)
	defer deadline.Stop()
	if len(todo) > 0 {
		w.giveBackSlot(wk)
		defer w.takeSlot(wk, deadline.C)
	}
	var waits []*wake
	for _, d := range todo {
		dw, ok := w.startDependency(d, chain, deadline.C)
		if !ok {
			return
		}
		if dw != nil {
			waits = append(waits, dw)
		}
	}
	for _, dw := range waits {
		select {
		case <-dw.done:
		case <-deadline.C:
			return
		case <-w.ctx.Done():
			return
		}
	}
	for _, id := range others {
		w.awaitReady(id, deadline.C)
	}
}

// startDependency starts the wake of the dependency d (or joins the one
// in progress) once a slot of max_wakes is free; nil when it is not to be
// woken now (failing lately); false when stop came or the connection
// closed first.
func (w *Waker) startDependency(d catalog.Dependency, chain []string, stop <-chan time.Time) (*wake, bool) {
	e := w.engine
	for {
		e.mu.Lock()
		if w.closed {
			e.mu.Unlock()
			return nil, false
		}
		if dw := e.wakes[d.ID]; dw != nil {
			e.mu.Unlock()
			return dw, true
		}
		if f := e.failures[d.ID]; f != nil && w.now().Before(f.after) {
			e.mu.Unlock()
			return nil, true
		}
		if w.running < w.maxWakes {
			dw := w.startLocked(catalog.WakeCandidate{ID: d.ID, Name: d.Name, Labels: d.Labels, State: d.State, Activity: d.Activity},
				CauseDependency, chain)
			e.mu.Unlock()
			return dw, true
		}
		freed := w.freed
		e.mu.Unlock()
		select {
		case <-freed:
		case <-stop:
			return nil, false
		case <-w.ctx.Done():
			return nil, false
		}
	}
}

// giveBackSlot frees wk's slot of max_wakes while it waits for its
// dependencies (R5k, R5d).
func (w *Waker) giveBackSlot(wk *wake) {
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if wk.slotless {
		return
	}
	wk.slotless = true
	w.freeSlotLocked()
}

// takeSlot takes a slot of max_wakes back for wk, waiting for one to be
// free; past stop, or once the connection closes, it takes it anyway (the
// wake then makes its one call, or ends).
func (w *Waker) takeSlot(wk *wake, stop <-chan time.Time) {
	e := w.engine
	for {
		e.mu.Lock()
		if !wk.slotless {
			e.mu.Unlock()
			return
		}
		if w.running < w.maxWakes || w.closed {
			wk.slotless = false
			w.running++
			e.mu.Unlock()
			return
		}
		freed := w.freed
		e.mu.Unlock()
		select {
		case <-freed:
			continue
		case <-stop:
		case <-w.ctx.Done():
		}
		e.mu.Lock()
		wk.slotless = false
		w.running++
		e.mu.Unlock()
		return
	}
}

// awaitReady waits until the catalog shows the instance id ready, gone or
// not running, or until stop.
func (w *Waker) awaitReady(id string, stop <-chan time.Time) {
	for {
		snap := w.catalog.Snapshot()
		if w.catalog.InstanceReady(id) {
			return
		}
		{
			select {
			case <-snap.Changed():
				continue
			case <-stop:
			case <-w.ctx.Done():
			}
		}
		return
	}
}

// warnOnce logs msg once per key for the Engine (R5k's cycles and caps);
// at most maxWarned keys are remembered, then forgotten all at once.
func (w *Waker) warnOnce(key, msg string, fields ...zap.Field) {
	e := w.engine
	e.mu.Lock()
	if e.warned == nil || len(e.warned) >= maxWarned {
		e.warned = map[string]bool{}
	}
	seen := e.warned[key]
	e.warned[key] = true
	e.mu.Unlock()
	if !seen {
		w.logger.Warn(msg, fields...)
	}
}

// dependedOn reports whether an instance up (not stopped, paused or
// dead) keeps s up through its caddy.depends_on (R5k): s is one of the
// dependencies the catalog gives it, the same a wake of it follows (its
// scope, the first catalog.MaxDependencies by name), so that a label
// keeps up no more than it would wake. Each dependent's are asked of the
// catalog once per pass of the idle loop (q.keeps), and only for one whose
// scope and selector cover s.
func (w *Waker) dependedOn(q *idleQueue, s catalog.Sleeper) bool {
	for _, d := range q.dependents {
		switch d.State {
		case catalog.StateStopped, catalog.StatePaused, catalog.StateFailed:
			continue
		}
		if !d.Covers(s) {
			continue
		}
		ids, ok := q.keeps[d.ID]
		if !ok {
			ids = w.catalog.DependencyIDs(nil, d.ID)
			q.keeps[d.ID] = ids
		}
		if slices.Contains(ids, s.ID) {
			return true
		}
	}
	return false
}
