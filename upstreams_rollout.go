package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Progressive rollouts (R4f, docs/rollouts.md): each route with a selector
// looks at its instances when its catalog changes and every
// rolloutEvery; once one of them carries caddy.rollout and a second
// version is routable beside the first, the route's decider (the owner of
// its entry in the fleet's record of rollouts) advances the state machine
// of package rollout on the counters of the requests this Caddy served,
// and writes the shares as runtime weights every Caddy of the fleet
// applies (R4c, R4e). The request path pays one atomic load (s.rolling)
// in record, and, while a rollout is under way, the counting of its
// requests at the end of each (upstreams_metrics.go).

// rolloutEvery is how often a route looks at its rollout.
var rolloutEvery = time.Second

// lookGap is the least time between two looks: a route looks at once when
// its catalog changes (a new version's first instance gets its share
// without waiting for the tick), but not at every change of a burst.
const lookGap = 200 * time.Millisecond

// routeRollout is a route's rollout as this Caddy sees it.
type routeRollout struct {
	s      *upstreamSource
	name   string
	match  func(map[string]string) bool
	logger *zap.Logger

	// counters are the requests this Caddy sent to each instance of the
	// route while a rollout was under way, by instance name; pruned to
	// the instances present at each look.
	counters sync.Map // string -> *rollout.Counters
	// counting is set while a rollout is under way on the route.
	counting atomic.Bool

	mu       sync.Mutex
	state    *rollout.State // last known; nil: none
	decider  bool
	cfg      rollout.Config
	cfgText  string
	window   rollout.Window
	first    map[string]time.Time // version -> when this Caddy first saw it routable
	mem      rollout.Record       // the record without a shared storage
	lastSnap *catalog.Snapshot
	warned   map[string]bool // warnings given once, bounded by maxWarned

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

const maxWarned = 256

// startRollouts begins watching the route's rollouts, if it has a
// selector.
func (s *upstreamSource) startRollouts(sel selector.Selector, name string) {
	if sel.Empty() || s.conn == nil {
		return
	}
	rr := &routeRollout{s: s, name: name, match: sel.Matches, logger: s.logger,
		first: map[string]time.Time{}, warned: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.rollout = rr
	go rr.run()
}

// stopRollouts ends the watch; the fleet's record stays for the others.
func (s *upstreamSource) stopRollouts() {
	if rr := s.rollout; rr != nil {
		rr.stopOnce.Do(func() { close(rr.stop) })
		<-rr.done
		rr.counting.Store(false)
	}
}

func (rr *routeRollout) run() {
	defer close(rr.done)
	tick := time.NewTicker(rolloutEvery)
	defer tick.Stop()
	for {
		changed := rr.s.conn.Catalog().Snapshot().Changed()
		select {
		case <-rr.stop:
			return
		case <-tick.C:
		case <-changed:
		}
		rr.look(time.Now())
		select { // a burst of catalog changes costs a look every lookGap
		case <-rr.stop:
			return
		case <-time.After(lookGap):
		}
	}
}

// counts reports whether the route's requests are counted for a rollout
// under way: the request path's one check (nil: a route without a
// selector).
func (rr *routeRollout) counts() bool { return rr != nil && rr.counting.Load() }

// counter is the counters of the instance named name.
func (rr *routeRollout) counter(name string) *rollout.Counters {
	if v, ok := rr.counters.Load(name); ok {
		return v.(*rollout.Counters)
	}
	v, _ := rr.counters.LoadOrStore(name, new(rollout.Counters))
	return v.(*rollout.Counters)
}

// versionOf is an instance's version (R4f).
func versionOf(st catalog.InstanceStatus) string {
	if v := st.Labels[rollout.LabelVersion]; v != "" && len(v) <= rollout.MaxVersionLen {
		return v
	}
	return st.Image
}

// routeVersion is one version's routable instances on the route.
type routeVersion struct {
	ids, names []string
	labels     map[string]string // of its first instance (by name) with caddy.rollout
}

// look is one look at the route's rollout at now.
func (rr *routeRollout) look(now time.Time) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	snap := rr.s.conn.Catalog().Snapshot()
	active := rr.state != nil && !rr.state.Final()
	if snap == rr.lastSnap && (rr.state == nil || rr.state.Final() && now.Sub(rr.state.Claimed) < rollout.ClaimTTL/2) {
		return // nothing changed, nothing under way: the common case
	}
	rr.lastSnap = snap
	versions, labelled := map[string]*routeVersion{}, false
	live := map[string]bool{}
	for _, st := range rr.s.conn.Catalog().Instances(rr.match) {
		live[st.Name] = true
		if !st.Routable || st.State == catalog.StateStandby.String() {
			continue
		}
		v := versionOf(st)
		rv := versions[v]
		if rv == nil {
			rv = &routeVersion{}
			versions[v] = rv
		}
		rv.ids, rv.names = append(rv.ids, st.ID), append(rv.names, st.Name)
		if _, ok := st.Labels[rollout.LabelRollout]; ok {
			labelled = true
			if rv.labels == nil {
				rv.labels = st.Labels
			}
		}
	}
	rr.counters.Range(func(k, _ any) bool {
		if !live[k.(string)] {
			rr.counters.Delete(k)
		}
		return true
	})
	for v := range rr.first {
		if versions[v] == nil {
			delete(rr.first, v)
		}
	}
	for v := range versions {
		if _, ok := rr.first[v]; !ok {
			rr.first[v] = now
		}
	}
	if !labelled && rr.state == nil {
		rr.counting.Store(false)
		return
	}
	present := make([]string, 0, len(versions))
	for v := range versions {
		present = append(present, v)
	}
	slices.SortFunc(present, func(a, b string) int {
		if c := rr.first[a].Compare(rr.first[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	rr.configure(present, versions)
	self := rr.s.conn.FleetID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var change rollout.Change
	var began bool
	decide := func(raw []byte) ([]byte, error) {
		rec, refused, err := rollout.Decode(raw, now)
		if err != nil {
			rr.warnOnce("record", "the fleet's rollouts record is refused, and replaced", zap.Error(err))
		}
		for _, r := range refused {
			rr.warnOnce("refused "+r.Route+" "+r.Owner+" "+r.Why, "a rollout entry of the fleet's record is refused, and replaced",
				zap.String("route", r.Route), zap.String("owner", r.Owner), zap.String("why", r.Why))
		}
		st, has := rec.Rollouts[rr.name]
		if has && !rollout.Owns(st, self, now) {
			rr.state, rr.decider = &st, false
			return nil, nil
		}
		rr.decider = true
		var cur *rollout.State
		if has {
			cur = &st
		}
		if old, nw, ok := rollout.Next(cur, present); ok && labelled && rr.cfgText != "" {
			if cur == nil && len(present) >= 2 && rr.first[present[0]].Equal(rr.first[present[len(present)-1]]) {
				rr.warnOnce("tie "+strings.Join(present, ","), "two versions came in one listing and no rollout is recorded: "+
					"none starts (which is old?); the weights stay as labelled")
			} else {
				st, has, began = rollout.Begin(old, nw, rr.cfg, now), true, true
			}
		}
		if !has {
			return nil, nil
		}
		prev := st
		n, o := versions[st.New], versions[st.Old]
		st, change = rollout.Advance(st, &rr.window, rr.cfg, now, count(n), count(o), rr.totals(n), rr.totals(o))
		if len(present) <= 1 {
			if st.Lone.IsZero() {
				st.Lone = now
			}
		} else {
			st.Lone = time.Time{}
		}
		if has && !began && change == rollout.Nothing && prev.Owner == self && prev.Lone.Equal(st.Lone) &&
			now.Sub(prev.Claimed) < rollout.ClaimTTL/2 {
			rr.state = &st
			return nil, nil // nothing to say yet: no write
		}
		st.Owner, st.Claimed = self, now
		if rollout.Ends(st, now) {
			delete(rec.Rollouts, rr.name)
			rr.state = nil
		} else {
			if err := rec.Put(rr.name, st); err != nil {
				rr.warnOnce("full", "no rollout recorded", zap.Error(err))
				return nil, nil
			}
			rr.state = &st
		}
		return rec.Encode()
	}
	var err error
	if self == "" {
		raw, _ := rr.mem.Encode()
		var next []byte
		if next, err = decide(raw); err == nil && next != nil {
			rr.mem, _, _ = rollout.Decode(next, now)
		}
	} else if follows := rr.follows(ctx, self, now); !follows {
		_, err = rr.s.conn.UpdateRollouts(ctx, decide) // under the lock: one verdict
	}
	if err != nil {
		rr.warnOnce("write", "the route's rollout cannot be read or written: its weights stay", zap.Error(err))
		return
	}
	if rr.state == nil {
		rr.counting.Store(false)
		return
	}
	st := *rr.state
	if !st.Final() {
		rr.counting.Store(true)
	} else {
		rr.counting.Store(false)
	}
	if !rr.decider {
		return
	}
	rr.report(st, began, change)
	if st.Verdict != rollout.Abandoned || active {
		rr.applyWeights(st, versions)
	}
}

// follows reads the record without the storage's lock and reports
// whether another Caddy decides the route's rollout (then rr.state is its
// entry): a follower never takes the lock.
func (rr *routeRollout) follows(ctx context.Context, self string, now time.Time) bool {
	raw, err := rr.s.conn.LoadRollouts(ctx)
	if err != nil {
		return false
	}
	rec, _, err := rollout.Decode(raw, now)
	if err != nil {
		return false
	}
	st, ok := rec.Rollouts[rr.name]
	if !ok || rollout.Owns(st, self, now) {
		return false
	}
	rr.state, rr.decider = &st, false
	return true
}

// configure reads the rollout's settings from the newest version's
// labels (else the first labelled one's), warning once per bad value.
func (rr *routeRollout) configure(present []string, versions map[string]*routeVersion) {
	var labels map[string]string
	for i := len(present) - 1; i >= 0 && labels == nil; i-- {
		labels = versions[present[i]].labels
	}
	if labels == nil {
		return // keep the last settings: the labelled version left
	}
	cfg, ok, warns := rollout.Parse(labels)
	for _, w := range warns {
		rr.warnOnce("label "+w.Error(), "a rollout label is ignored", zap.Error(w))
	}
	if !ok {
		rr.cfgText = ""
		return
	}
	rr.cfg, rr.cfgText = cfg, cfg.String()
}

func count(v *routeVersion) int {
	if v == nil {
		return 0
	}
	return len(v.names)
}

// totals sums the counters of a version's instances.
func (rr *routeRollout) totals(v *routeVersion) rollout.Sample {
	var s rollout.Sample
	if v == nil {
		return s
	}
	for _, name := range v.names {
		if c, ok := rr.counters.Load(name); ok {
			c.(*rollout.Counters).AddTo(&s)
		}
	}
	return s
}

// report logs what changed, once, and counts and emits a rollback.
func (rr *routeRollout) report(st rollout.State, began bool, change rollout.Change) {
	fields := []zap.Field{zap.String("route", rr.name), zap.String("old", st.Old), zap.String("new", st.New),
		zap.Int("share", st.Share()), zap.String("verdict", string(st.Verdict))}
	if began {
		rr.logger.Info("rollout begins", append(fields, zap.String("settings", rr.cfgText))...)
	}
	figures := []zap.Field{zap.String("why", st.Why),
		zap.Uint64("new_requests", st.NewFigures.Requests), zap.Float64("new_error_rate", st.NewFigures.ErrorRate),
		zap.Duration("new_p99", st.NewFigures.P99), zap.Uint64("old_requests", st.OldFigures.Requests),
		zap.Float64("old_error_rate", st.OldFigures.ErrorRate), zap.Duration("old_p99", st.OldFigures.P99)}
	switch change {
	case rollout.Failed:
		rr.logger.Warn("rollout rolled back", append(fields, figures...)...)
		rr.s.conn.RolledBack(rr.name, map[string]any{"old": st.Old, "new": st.New, "step": st.Step,
			"share": st.Steps[st.Step], "why": st.Why,
			"new_requests": st.NewFigures.Requests, "new_error_rate": st.NewFigures.ErrorRate, "new_p99_ms": st.NewFigures.P99.Milliseconds(),
			"old_requests": st.OldFigures.Requests, "old_error_rate": st.OldFigures.ErrorRate, "old_p99_ms": st.OldFigures.P99.Milliseconds()})
	case rollout.Passed, rollout.Finished, rollout.Halted, rollout.Left:
		rr.logger.Info("rollout "+string(st.Verdict), append(fields, figures...)...)
	}
}

// applyWeights writes the weights of st's share (rollout.Weights) onto
// the route's instances: the new version's, the old version's, and 0 for
// any other version.
func (rr *routeRollout) applyWeights(st rollout.State, versions map[string]*routeVersion) {
	n, o := versions[st.New], versions[st.Old]
	nw, ow := rollout.Weights(st.Share(), count(n), count(o))
	want, names := map[string]int{}, map[string]string{}
	for v, rv := range versions {
		w := 0
		switch v {
		case st.New:
			w = nw
		case st.Old:
			w = ow
		}
		for i, id := range rv.ids {
			want[id], names[id] = w, rv.names[i]
		}
	}
	if _, err := rr.s.conn.RolloutWeights(want, names); err != nil && !errors.Is(err, connection.ErrNoFleet) {
		rr.warnOnce("weights", "the rollout's weights cannot be written: they stay as they were", zap.Error(err))
	}
}

// warnOnce logs msg once per key (bounded).
func (rr *routeRollout) warnOnce(key, msg string, fields ...zap.Field) {
	if rr.warned[key] {
		return
	}
	if len(rr.warned) >= maxWarned {
		clear(rr.warned)
	}
	rr.warned[key] = true
	rr.logger.Warn(msg, append([]zap.Field{zap.String("route", rr.name)}, fields...)...)
}

// RolloutStatus is the route's rollout as the admin API shows it; ok
// false when it has none.
func (s *upstreamSource) RolloutStatus() (rollout.Status, bool) {
	rr := s.rollout
	if rr == nil {
		return rollout.Status{}, false
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.state == nil {
		return rollout.Status{}, false
	}
	st := *rr.state
	return rollout.Status{Kind: s.conn.Kind(), Daemon: s.conn.Address(), Route: rr.name, State: st,
		Share: st.Share(), Drained: st.Verdict == rollout.Done, Decider: rr.decider, Config: rr.cfgText}, true
}

// RolloutCommand promotes or aborts the route's rollout (`caddy dicer
// rollout promote|abort`), through the fleet's record: the route's
// decider applies it at its next look. who names the operator's Caddy.
func (s *upstreamSource) RolloutCommand(action, who string) error {
	rr := s.rollout
	if rr == nil {
		return fmt.Errorf("the route %s has no selector: no rollout", s.Selector)
	}
	now := time.Now()
	var found bool
	var err error
	cmd := func(raw []byte) ([]byte, error) {
		rec, _, _ := rollout.Decode(raw, now)
		st, ok := rec.Rollouts[rr.name]
		if !ok || st.Final() {
			return nil, nil
		}
		found = true
		switch action {
		case "promote":
			st = rollout.Promote(st, now, who)
		case "abort":
			st = rollout.Abort(st, now, who)
		default:
			return nil, fmt.Errorf("unknown action %q: promote or abort", action)
		}
		if err := rec.Put(rr.name, st); err != nil {
			return nil, err
		}
		return rec.Encode()
	}
	rr.mu.Lock()
	if rr.s.conn.FleetID() == "" {
		raw, _ := rr.mem.Encode()
		var next []byte
		if next, err = cmd(raw); err == nil && next != nil {
			rr.mem, _, _ = rollout.Decode(next, now)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = rr.s.conn.UpdateRollouts(ctx, cmd)
		cancel()
	}
	rr.lastSnap = nil
	rr.mu.Unlock()
	if err != nil {
		return err
	}
	if !found {
		return rollout.ErrNoRollout
	}
	if action == "abort" {
		s.conn.RolledBack(rr.name, map[string]any{"why": "aborted by " + who})
	}
	rr.look(now) // the weights now
	return nil
}
