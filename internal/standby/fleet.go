package standby

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// One idle clock per instance across a fleet of Caddys that share a
// storage (R5m): each Caddy's publisher writes, for every instance it
// routes to, a lease saying when it last did and how many requests it has
// in flight, at most once per fleet.LeaseEvery of its standby_after and
// only while it is used; before an instance is put on standby, the leases
// of the other Caddys are read (fleet.HeldUntil), and one that keeps it
// awake puts the standby off until then. While the storage cannot be read
// nothing is put on standby: logged once, counted (Options.FleetFailed).
//
// What the publisher wrote it removes: the lease of an instance no longer
// labelled, the lease folder of one gone from the daemon (its ID is never
// used again), and every lease it holds when it stops for good (the
// Engine's last connection closes, Caddy stops), not at a config reload
// that keeps the Engine. A pool's instance costs storage reads only while
// this Caddy routes to it (loadReadFor).

// fleetState is the fleet an Engine shares through, and who hears its
// failures.
type fleetState struct {
	fleet  *fleet.Fleet
	logger *zap.Logger
	failed func(op string)
}

// ShareThrough makes f the fleet the Engine's scale to zero shares with
// (f's storage set, or not: see fleet.Fleet.SetStorage), starting its
// publisher the first time; failed, if set, hears each failed read
// ("read") or write ("write") of the storage.
func (e *Engine) ShareThrough(f *fleet.Fleet, logger *zap.Logger, failed func(op string)) {
	e.fleet.Store(&fleetState{fleet: f, logger: logger, failed: failed})
	e.fleetOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		e.fleetStop, e.fleetDone = cancel, make(chan struct{})
		go e.publishLoop(ctx)
	})
}

// stopFleet stops the publisher, if it runs.
func (e *Engine) stopFleet() {
	e.fleetOnce.Do(func() {}) // none may start after
	if e.fleetStop != nil {
		e.fleetStop()
		<-e.fleetDone
	}
}

// heldUntil is until when another Caddy keeps instance id awake, as last
// read (zero: none).
func (e *Engine) heldUntil(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held[id]
}

// fleetHolds reports whether the instance s is not to be put on standby
// now because another Caddy of the fleet keeps it awake, or because the
// fleet's storage cannot be read; it records until when for the idle
// loop, which looks at s again then.
func (w *Waker) fleetHolds(ctx context.Context, s catalog.Sleeper) bool {
	e := w.engine
	st := e.fleet.Load()
	if st == nil || !st.fleet.Shared() {
		return false
	}
	now := w.now()
	until, err := st.fleet.HeldUntil(ctx, s.ID, s.Policy.After, now)
	if err != nil {
		e.fleetFailed(st, "read", err)
		until = now.Add(busyRecheck(s.Policy.After)) // stays awake; asks again then
	} else {
		e.fleetHealth.Works(st.logger)
	}
	e.mu.Lock()
	if until.IsZero() {
		delete(e.held, s.ID)
	} else {
		e.held[s.ID] = until
	}
	e.mu.Unlock()
	if until.IsZero() {
		return false
	}
	w.logger.Debug("instance kept awake by another Caddy of the fleet", zap.String("instance", s.Name),
		zap.Time("until", until))
	return true
}

// fleetFailed counts a failed call of the fleet's storage and says once,
// until it works again, that nothing is put on standby meanwhile.
func (e *Engine) fleetFailed(st *fleetState, op string, err error) {
	if st.failed != nil {
		st.failed(op)
	}
	e.fleetHealth.Failed(st.logger, "the fleet's storage cannot be used: no instance is put on standby until it can "+
		"(wakes go on)", err)
}

// published is what the publisher last wrote of one instance.
type published struct {
	wrote, use time.Time
	inFlight   int
	// busyAt is when the publisher last saw requests in flight.
	busyAt time.Time
}

// publishEvery is how often the publisher looks at the Engine's instances;
// an instance used after quietBeforeKick without a request makes it look
// at once, so that a request another Caddy could not know of yet is
// published within the storage's write time, not the next tick.
const (
	publishEvery    = time.Second
	quietBeforeKick = 500 * time.Millisecond
)

// kickPublisher makes the publisher look now (without blocking: a look
// already asked for covers this one).
func (e *Engine) kickPublisher() {
	select {
	case e.fleetKick <- struct{}{}:
	default:
	}
}

// publishLoop writes this Caddy's leases on the instances it routes to
// until ctx ends (see the top of this file).
func (e *Engine) publishLoop(ctx context.Context) {
	defer close(e.fleetDone)
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	state := map[string]*published{}
	type item struct {
		id    string
		act   *catalog.Activity
		after time.Duration
		pool  bool
	}
	var items []item
	for {
		select {
		case <-ctx.Done():
			e.releaseAll(state)
			return
		case <-tick.C:
		case <-e.fleetKick:
		}
		st := e.fleet.Load()
		if st == nil || !st.fleet.Shared() {
			continue
		}
		items = items[:0]
		e.mu.Lock()
		for id, sa := range e.shared {
			if sa.after > 0 || sa.pool {
				items = append(items, item{id, sa.act, sa.after, sa.pool})
			}
		}
		gone := e.gone
		e.gone = nil
		e.mu.Unlock()
		now := time.Now()
		seen := make(map[string]bool, len(items))
		for _, it := range items {
			seen[it.id] = true
			every := fleet.LeaseEvery(it.after)
			if it.pool {
				every = fleet.LeaseEvery(0) // its load, every second (R5j)
			}
			e.publishOne(ctx, st, state, it.id, it.act, every, it.after, now)
			if it.pool {
				e.readLoad(ctx, st, it.id, it.act, it.after, now)
			}
		}
		for id := range state {
			if seen[id] {
				continue
			}
			if _, ok := gone[id]; ok { // gone from the daemon: its folder goes
				_ = st.fleet.Forget(ctx, id)
			} else { // no longer labelled: its lease goes
				_ = st.fleet.Release(ctx, id)
			}
			delete(state, id)
		}
	}
}

// releaseAll deletes the leases the publisher wrote, as it stops for good.
func (e *Engine) releaseAll(state map[string]*published) {
	st := e.fleet.Load()
	if st == nil || len(state) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for id := range state {
		if err := st.fleet.Release(ctx, id); err != nil {
			if st.logger != nil {
				st.logger.Debug("releasing a lease as the Engine's scale to zero stops", zap.Error(err))
			}
			return // the storage is away: the others' readers remove them past their end
		}
	}
}

// releaseTimeout bounds the release of the leases as the publisher stops.
const releaseTimeout = 5 * time.Second

// loadReadFor is how long after this Caddy last routed to a pool's
// instance it still reads the fleet's load on it (R5j): an instance it
// does not route to costs no storage call, and its fleet load reads 0
// until it routes to it again (read within publishEvery then).
const loadReadFor = 10 * time.Second

// readLoad sets the fleet's load on a pool's instance beyond this Caddy's
// (R5j): the requests in flight the other Caddys' leases say, read while
// this Caddy routes to it. Unreadable: the load last read stays.
func (e *Engine) readLoad(ctx context.Context, st *fleetState, id string, act *catalog.Activity, after time.Duration, now time.Time) {
	if act.InFlight() == 0 && now.Sub(act.Last()) > loadReadFor {
		act.SetFleetLoad(0)
		return
	}
	n, err := st.fleet.OthersInFlight(ctx, id, after, now)
	if err != nil {
		e.fleetFailed(st, "read", err)
		return
	}
	act.SetFleetLoad(n)
}

// publishOne writes the lease of one instance if it is due: used since the
// last write, or with requests in flight, at most once per every (a
// third of its standby_after, or a second for a pool's instance, whose
// load the fleet shares); an instance down (its last use forgotten) has
// its lease deleted.
func (e *Engine) publishOne(ctx context.Context, st *fleetState, state map[string]*published, id string, act *catalog.Activity, every, after time.Duration, now time.Time) {
	p := state[id]
	last, inFlight := act.Last(), act.InFlight()
	if last.IsZero() {
		if p != nil {
			_ = st.fleet.Release(ctx, id)
			delete(state, id)
		}
		return
	}
	if p == nil {
		p = &published{}
		state[id] = p
	}
	if inFlight > 0 {
		p.busyAt = now
	}
	use := last
	if p.busyAt.After(use) {
		use = p.busyAt
	}
	changed := !use.Equal(p.use) || (inFlight > 0) != (p.inFlight > 0)
	// (A tick's jitter may not put a write off by a whole tick.)
	if !p.wrote.IsZero() && (!changed || now.Sub(p.wrote) < every-publishEvery/4) {
		return
	}
	l := fleet.Lease{LastUse: use.Round(0), InFlight: inFlight, Expires: now.Add(fleet.LeaseTTL(every)).Round(0)}
	if after > 0 {
		l.Until = use.Add(after).Round(0) // it holds that long: no reader removes it before
	}
	if err := st.fleet.Publish(ctx, id, l); err != nil {
		e.fleetFailed(st, "write", err)
		return
	}
	e.fleetHealth.Works(st.logger)
	p.wrote, p.use, p.inFlight = now, use, inFlight
}

// Engine is the Engine's scale-to-zero state the Waker is part of.
func (w *Waker) Engine() *Engine { return w.engine }
