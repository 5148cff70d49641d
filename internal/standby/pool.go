package standby

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
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
)

// maxDependencyDepth bounds how far a chain of caddy.depends_on is
// followed, woken or searched for a cycle.
const maxDependencyDepth = 8

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

// wakeDependencies wakes, before wk's instance, every instance its
// caddy.depends_on matches, and waits until they are ready or their wakes
// ended (R5k). A dependency that depends, through its own labels, on the
// instance being woken is a cycle: warned once per pair, and not waited
// for. One that Caddy does not wake (no caddy.standby_after) is waited for
// only while it runs.
func (w *Waker) wakeDependencies(wk *wake) {
	deps := w.catalog.DependenciesOf(nil, wk.id)
	if len(deps) == 0 {
		return
	}
	chain := append(slices.Clip(wk.chain), wk.id)
	var waits []*wake
	var others []string
	e := w.engine
	for _, d := range deps {
		if d.Ready {
			continue
		}
		if slices.Contains(chain, d.ID) || w.reaches(d, wk.id) {
			w.warnCycle(wk.name, d.Name)
			continue
		}
		if len(chain) >= maxDependencyDepth {
			continue
		}
		if !d.Wakeable {
			if d.State == catalog.StateRunning || d.State == catalog.StateStarting {
				others = append(others, d.ID)
			}
			continue
		}
		e.mu.Lock()
		dw := e.wakes[d.ID]
		if dw == nil && !w.closed {
			if f := e.failures[d.ID]; f == nil || !w.now().Before(f.after) {
				dw = w.startLocked(catalog.WakeCandidate{ID: d.ID, Name: d.Name, Labels: d.Labels, State: d.State, Activity: d.Activity},
					CauseDependency, chain)
			}
		}
		e.mu.Unlock()
		if dw != nil {
			waits = append(waits, dw)
		}
	}
	deadline := time.NewTimer(wakeWatch)
	defer deadline.Stop()
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

// reaches reports whether d depends, through caddy.depends_on, on the
// instance id, up to maxDependencyDepth links.
func (w *Waker) reaches(d catalog.Dependency, id string) bool {
	seen := map[string]bool{}
	var walk func(from catalog.Dependency, depth int) bool
	walk = func(from catalog.Dependency, depth int) bool {
		if from.DependsOn == nil || depth >= maxDependencyDepth || seen[from.ID] {
			return false
		}
		seen[from.ID] = true
		for _, next := range w.catalog.DependenciesOf(nil, from.ID) {
			if next.ID == id || walk(next, depth+1) {
				return true
			}
		}
		return false
	}
	return walk(d, 0)
}

// warnCycle warns, once per pair of instances per Engine, that a and b
// depend on each other (R5k).
func (w *Waker) warnCycle(a, b string) {
	e := w.engine
	key := min(a, b) + "\x00" + max(a, b)
	e.mu.Lock()
	if e.cycles == nil {
		e.cycles = map[string]bool{}
	}
	seen := e.cycles[key]
	e.cycles[key] = true
	e.mu.Unlock()
	if !seen {
		w.logger.Warn("caddy.depends_on makes a cycle: neither instance is woken for the other",
			zap.String("instance", a), zap.String("depends_on", b))
	}
}

// dependedOn reports whether an instance up (not stopped, paused or
// dead) depends on s through its caddy.depends_on (R5k): s stays up.
func dependedOn(s catalog.Sleeper, dependents map[string]catalog.Dependent) bool {
	for _, d := range dependents {
		if d.ID == s.ID || !d.DependsOn.Matches(s.Labels) {
			continue
		}
		switch d.State {
		case catalog.StateStopped, catalog.StatePaused, catalog.StateFailed:
		default:
			return true
		}
	}
	return false
}
