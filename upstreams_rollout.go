package caddydicer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
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

// routeRollout is a route's rollouts as this Caddy sees them: one per
// unit of the route, the instances that list the same hosts (unitRollout).
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
	units    map[string]*unitRollout // by hosts key (hostsKey)
	mem      rollout.Record          // the record without a shared storage
	lastSnap *catalog.Snapshot
	warned   map[string]bool // warnings given once, bounded by maxWarned

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// unitRollout is the rollout of one unit of a route: the instances whose
// caddy.host lists the same hosts (hostsKey; "" for those without
// caddy.host, which the route serves for any host). A route's versions
// are a unit's, so that on a selector route serving several tenants'
// hosts one tenant's deploy neither begins, abandons nor weighs another's
// rollout (R4f): a unit's rollout writes weights only onto the instances
// of its own versions.
type unitRollout struct {
	hosts string // the hosts key
	key   string // its entry in the fleet's record (unitKey)

	state   *rollout.State // last known; nil: none
	decider bool
	cfg     rollout.Config
	cfgText string
	window  rollout.Window
	first   map[string]time.Time // version -> when this Caddy first saw it routable

	// refused says why the unit's rollout has no entry in the fleet's
	// record (full), weights why its shares cannot be written (the
	// switches record full): both shown in its status, logged once.
	refused, weights string

	// Of the current look: the unit's routable instances by version,
	// its versions oldest first, whether one carries caddy.rollout,
	// whether a rollout was under way before, what the look did.
	versions map[string]*routeVersion
	present  []string
	labelled bool
	active   bool
	began    bool
	change   rollout.Change
}

const maxWarned = 256

// hostsKey is the unit of an instance on its route (R4f): the hosts its
// caddy.host lists (normalized as routing reads them, sorted, once
// each), "" without caddy.host, "(none)" for a caddy.host that lists no
// host it can serve.
func hostsKey(labels map[string]string) string {
	hosts, listed := catalog.RoutedHosts(labels)
	if !listed {
		return ""
	}
	if len(hosts) == 0 {
		return "(none)"
	}
	slices.Sort(hosts)
	return strings.Join(slices.Compact(hosts), ",")
}

// unitKey is the entry of a route's unit in the fleet's record: the
// route's name for the instances without caddy.host (as before units),
// else the name and the hosts after a line feed, which no route name
// holds (a hash of the hosts when that is over rollout.MaxName).
func unitKey(route, hosts string) string {
	if hosts == "" {
		return route
	}
	if k := route + "\n" + hosts; len(k) <= rollout.MaxName {
		return k
	}
	sum := sha256.Sum256([]byte(hosts))
	return route + "\nsha256:" + hex.EncodeToString(sum[:16])
}

// unit is the route's unit of hosts key hosts, made when missing.
func (rr *routeRollout) unit(hosts string) *unitRollout {
	u := rr.units[hosts]
	if u == nil {
		u = &unitRollout{hosts: hosts, key: unitKey(rr.name, hosts), first: map[string]time.Time{}}
		rr.units[hosts] = u
	}
	return u
}

// startRollouts begins watching the route's rollouts, if it has a
// selector.
func (s *upstreamSource) startRollouts(sel selector.Selector, name string) {
	if sel.Empty() || s.conn == nil {
		return
	}
	rr := &routeRollout{s: s, name: name, match: sel.Matches, logger: s.logger,
		units: map[string]*unitRollout{}, warned: map[string]bool{},
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

// idle reports whether no unit of the route has a rollout to look at:
// none, or one ended whose claim is fresh (a rollout refused for want of
// room in the record tries again at each look).
func (rr *routeRollout) idle(now time.Time) bool {
	for _, u := range rr.units {
		if u.refused != "" {
			return false
		}
		if u.state != nil && !(u.state.Final() && now.Sub(u.state.Claimed) < rollout.ClaimTTL/2) {
			return false
		}
	}
	return true
}

// look is one look at the route's rollouts at now.
func (rr *routeRollout) look(now time.Time) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	snap := rr.s.conn.Catalog().Snapshot()
	if snap == rr.lastSnap && rr.idle(now) {
		return // nothing changed, nothing under way: the common case
	}
	rr.lastSnap = snap
	for _, u := range rr.units {
		u.versions, u.present, u.labelled = map[string]*routeVersion{}, u.present[:0], false
		u.active, u.began, u.change = u.state != nil && !u.state.Final(), false, rollout.Nothing
	}
	live := map[string]bool{}
	for _, st := range rr.s.conn.Catalog().Instances(rr.match) {
		live[st.Name] = true
		if !st.Routable || st.State == catalog.StateStandby.String() {
			continue
		}
		u := rr.unit(hostsKey(st.Labels))
		if u.versions == nil {
			u.versions = map[string]*routeVersion{}
		}
		v := versionOf(st)
		rv := u.versions[v]
		if rv == nil {
			rv = &routeVersion{}
			u.versions[v] = rv
		}
		rv.ids, rv.names = append(rv.ids, st.ID), append(rv.names, st.Name)
		if _, ok := st.Labels[rollout.LabelRollout]; ok {
			u.labelled = true
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
	var work []*unitRollout
	for hosts, u := range rr.units {
		for v := range u.first {
			if u.versions[v] == nil {
				delete(u.first, v)
			}
		}
		for v := range u.versions {
			if _, ok := u.first[v]; !ok {
				u.first[v] = now
			}
		}
		if !u.labelled && u.state == nil {
			u.refused, u.weights = "", ""
			if len(u.versions) == 0 {
				delete(rr.units, hosts) // bounded by the route's instances
			}
			continue
		}
		if u.state == nil && len(u.versions) < 2 {
			// Nothing to begin, none under way here: no storage call (a
			// unit's steady state; an entry of the record another Caddy
			// decides, or a restart left, is read at the next version).
			u.refused, u.weights = "", ""
			continue
		}
		for v := range u.versions {
			u.present = append(u.present, v)
		}
		slices.SortFunc(u.present, func(a, b string) int {
			if c := u.first[a].Compare(u.first[b]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		rr.configure(u)
		work = append(work, u)
	}
	slices.SortFunc(work, func(a, b *unitRollout) int { return strings.Compare(a.key, b.key) })
	if len(work) == 0 {
		rr.counting.Store(false)
		return
	}
	self := rr.s.conn.FleetID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	decide := func(mine []*unitRollout) func(raw []byte) ([]byte, error) {
		return func(raw []byte) ([]byte, error) {
			rec, refused, err := rollout.Decode(raw, now)
			if err != nil {
				rr.warnOnce("record", "the fleet's rollouts record is refused, and replaced", zap.Error(err))
			}
			for _, r := range refused {
				rr.warnOnce("refused "+r.Route+" "+r.Owner+" "+r.Why, "a rollout entry of the fleet's record is refused, and replaced",
					zap.String("entry", r.Route), zap.String("owner", r.Owner), zap.String("why", r.Why))
			}
			wrote := false
			for _, u := range mine {
				if rr.decideUnit(u, &rec, self, now) {
					wrote = true
				}
			}
			if !wrote {
				return nil, nil
			}
			return rec.Encode()
		}
	}
	var err error
	if self == "" {
		raw, _ := rr.mem.Encode()
		var next []byte
		if next, err = decide(work)(raw); err == nil && next != nil {
			rr.mem, _, _ = rollout.Decode(next, now)
		}
	} else if mine := rr.follows(ctx, work, self, now); len(mine) > 0 {
		_, err = rr.s.conn.UpdateRollouts(ctx, decide(mine)) // under the lock: one verdict
	}
	if err != nil {
		rr.warnOnce("write", "the route's rollout cannot be read or written: its weights stay", zap.Error(err))
		return
	}
	counting := false
	for _, u := range rr.units {
		if u.state != nil && !u.state.Final() {
			counting = true
		}
	}
	rr.counting.Store(counting)
	for _, u := range work {
		if u.state == nil || !u.decider {
			continue
		}
		st := *u.state
		rr.report(u, st)
		if st.Verdict != rollout.Abandoned || u.active {
			rr.applyWeights(u, st)
		}
	}
}

// decideUnit is the decider's look at u's entry of rec at now: it begins,
// advances, renews or ends it, and reports whether rec changed. An entry
// another Caddy owns makes u follow it.
func (rr *routeRollout) decideUnit(u *unitRollout, rec *rollout.Record, self string, now time.Time) bool {
	st, has := rec.Rollouts[u.key]
	if has && !rollout.Owns(st, self, now) {
		u.state, u.decider = &st, false
		return false
	}
	u.decider = true
	var cur *rollout.State
	if has {
		cur = &st
	}
	present := u.present
	if old, nw, ok := rollout.Next(cur, present); ok && u.labelled && u.cfgText != "" {
		if cur == nil && len(present) >= 2 && u.first[present[0]].Equal(u.first[present[len(present)-1]]) {
			rr.warnOnce("tie "+u.key+" "+strings.Join(present, ","), "two versions came in one listing and no rollout is recorded: "+
				"none starts (which is old?); the weights stay as labelled", zap.String("hosts", catalog.ClipLabel(u.hosts)))
		} else {
			retired := ""
			if cur != nil {
				// The rollout superseded: its version that is not the
				// stable one gets 0 (it is one of its own versions).
				if retired = cur.New; cur.Stable() == cur.New {
					retired = cur.Old
				}
			}
			st, has, u.began = rollout.Begin(old, nw, u.cfg, now), true, true
			st.Retired = retired
		}
	}
	if !has {
		return false
	}
	prev := st
	n, o := u.versions[st.New], u.versions[st.Old]
	if u.weights != "" && !st.Final() && count(n) > 0 && count(o) > 0 {
		// Its shares are not in force: the step is not judged on
		// requests they did not split, and starts its window again
		// once they are.
		u.window = rollout.Window{}
	} else {
		st, u.change = rollout.Advance(st, &u.window, u.cfg, now, count(n), count(o), rr.totals(n), rr.totals(o))
	}
	if len(present) <= 1 {
		if st.Lone.IsZero() {
			st.Lone = now
		}
	} else {
		st.Lone = time.Time{}
	}
	if !u.began && u.change == rollout.Nothing && prev.Owner == self && prev.Lone.Equal(st.Lone) &&
		now.Sub(prev.Claimed) < rollout.ClaimTTL/2 {
		u.state = &st
		return false // nothing to say yet: no write
	}
	st.Owner, st.Claimed = self, now
	if rollout.Ends(st, now) {
		delete(rec.Rollouts, u.key)
		u.state = nil
		return true
	}
	if err := rec.Put(u.key, st); err != nil {
		u.refused = "no rollout recorded: " + err.Error()
		rr.warnOnce("full "+u.key, "no rollout recorded", zap.String("hosts", catalog.ClipLabel(u.hosts)), zap.Error(err))
		u.state = nil
		return false
	}
	u.refused = ""
	u.state = &st
	return true
}

// follows reads the record without the storage's lock; the units whose
// entry another Caddy decides follow it (their state is its entry), and
// it returns the others, which take the lock: a Caddy that follows every
// unit never takes it.
func (rr *routeRollout) follows(ctx context.Context, work []*unitRollout, self string, now time.Time) []*unitRollout {
	raw, err := rr.s.conn.LoadRollouts(ctx)
	if err != nil {
		return work
	}
	rec, _, err := rollout.Decode(raw, now)
	if err != nil {
		return work
	}
	var mine []*unitRollout
	for _, u := range work {
		st, ok := rec.Rollouts[u.key]
		if !ok || rollout.Owns(st, self, now) {
			mine = append(mine, u)
			continue
		}
		u.state, u.decider = &st, false
	}
	return mine
}

// configure reads u's rollout settings from its newest version's
// labels (else the first labelled one's), warning once per bad value.
func (rr *routeRollout) configure(u *unitRollout) {
	var labels map[string]string
	for i := len(u.present) - 1; i >= 0 && labels == nil; i-- {
		labels = u.versions[u.present[i]].labels
	}
	if labels == nil {
		return // keep the last settings: the labelled version left
	}
	cfg, ok, warns := rollout.Parse(labels)
	for _, w := range warns {
		rr.warnOnce("label "+w.Error(), "a rollout label is ignored", zap.String("hosts", catalog.ClipLabel(u.hosts)), zap.Error(w))
	}
	if !ok {
		u.cfgText = ""
		return
	}
	u.cfg, u.cfgText = cfg, cfg.String()
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

// report logs what changed in u's rollout st, once, and counts and
// emits a rollback.
func (rr *routeRollout) report(u *unitRollout, st rollout.State) {
	fields := []zap.Field{zap.String("route", rr.name), zap.String("hosts", catalog.ClipLabel(u.hosts)), zap.String("old", st.Old), zap.String("new", st.New),
		zap.Int("share", st.Share()), zap.String("verdict", string(st.Verdict))}
	if u.began {
		rr.logger.Info("rollout begins", append(fields, zap.String("settings", u.cfgText))...)
	}
	figures := []zap.Field{zap.String("why", st.Why),
		zap.Uint64("new_requests", st.NewFigures.Requests), zap.Float64("new_error_rate", st.NewFigures.ErrorRate),
		zap.Duration("new_p99", st.NewFigures.P99), zap.Uint64("old_requests", st.OldFigures.Requests),
		zap.Float64("old_error_rate", st.OldFigures.ErrorRate), zap.Duration("old_p99", st.OldFigures.P99)}
	switch u.change {
	case rollout.Failed:
		rr.logger.Warn("rollout rolled back", append(fields, figures...)...)
		rr.s.conn.RolledBack(rr.name, map[string]any{"hosts": catalog.ClipLabel(u.hosts), "old": st.Old, "new": st.New, "step": st.Step,
			"share": st.Steps[st.Step], "why": st.Why,
			"new_requests": st.NewFigures.Requests, "new_error_rate": st.NewFigures.ErrorRate, "new_p99_ms": st.NewFigures.P99.Milliseconds(),
			"old_requests": st.OldFigures.Requests, "old_error_rate": st.OldFigures.ErrorRate, "old_p99_ms": st.OldFigures.P99.Milliseconds()})
	case rollout.Passed, rollout.Finished, rollout.Halted, rollout.Left:
		rr.logger.Info("rollout "+string(st.Verdict), append(fields, figures...)...)
	}
}

// applyWeights writes the weights of st's share (rollout.Weights) onto
// the instances of u's rollout's own versions, and of none other: the
// new version's, the old version's, and 0 onto the version of the
// rollout st superseded (st.Retired). Instances of other units, and of a
// version of u that is in no rollout, keep their weights. When the
// switches record is full (fleet.ErrFull, R4e), u.weights says so: its
// status shows it, and its steps wait.
func (rr *routeRollout) applyWeights(u *unitRollout, st rollout.State) {
	n, o := u.versions[st.New], u.versions[st.Old]
	nw, ow := rollout.Weights(st.Share(), count(n), count(o))
	want, names := map[string]int{}, map[string]string{}
	add := func(rv *routeVersion, w int) {
		if rv == nil {
			return
		}
		for i, id := range rv.ids {
			want[id], names[id] = w, rv.names[i]
		}
	}
	if r := st.Retired; r != "" && r != st.New && r != st.Old {
		add(u.versions[r], 0)
	}
	add(n, nw)
	add(o, ow)
	_, err := rr.s.conn.RolloutWeights(want, names)
	switch {
	case err == nil || errors.Is(err, connection.ErrNoFleet):
		u.weights = ""
	case errors.Is(err, fleet.ErrFull):
		u.weights = fmt.Sprintf("its weights are not written: the daemon's switches record holds %d runtime weights, none of a gone instance "+
			"(clear some: caddy dicer weight <selector> clear); its step waits", fleet.MaxWeightSwitches)
		rr.warnOnce("weights full "+u.key, "the rollout's weights cannot be written: the switches record is full; its step waits",
			zap.String("hosts", catalog.ClipLabel(u.hosts)), zap.Error(err))
	default:
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

// RolloutStatuses are the route's rollouts as the admin API shows them,
// one per unit with a rollout (or one refused), in the order of their
// hosts.
func (s *upstreamSource) RolloutStatuses() []rollout.Status {
	rr := s.rollout
	if rr == nil {
		return nil
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	var out []rollout.Status
	for _, u := range rr.units {
		if u.state == nil && u.refused == "" {
			continue
		}
		st := rollout.Status{Kind: s.conn.Kind(), Daemon: s.conn.Address(), Route: rr.name, Hosts: catalog.ClipLabel(u.hosts),
			Decider: u.decider, Config: u.cfgText, Blocked: u.refused}
		if u.state != nil {
			st.State, st.Share, st.Drained = *u.state, u.state.Share(), u.state.Verdict == rollout.Done
			if u.weights != "" && !u.state.Final() {
				st.Blocked = u.weights
			}
		} else if old, nw, ok := rollout.Next(nil, u.present); ok {
			st.Old, st.New = old, nw
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b rollout.Status) int { return strings.Compare(a.Hosts, b.Hosts) })
	return out
}

// RolloutCommand promotes or aborts the route's rollouts under way
// (`caddy dicer rollout promote|abort`): of the unit whose caddy.host
// lists hosts (in any order), or of every unit when hosts is "", through
// the fleet's record: each unit's decider applies it at its next look.
// who names the operator's Caddy.
func (s *upstreamSource) RolloutCommand(action, hosts, who string) error {
	rr := s.rollout
	if rr == nil {
		return fmt.Errorf("the route %s has no selector: no rollout", s.Selector)
	}
	if action != "promote" && action != "abort" {
		return fmt.Errorf("unknown action %q: promote or abort", action)
	}
	now := time.Now()
	rr.mu.Lock()
	want := ""
	if hosts != "" {
		want = hostsKey(map[string]string{catalog.LabelHost: hosts})
	}
	var units []*unitRollout
	for _, u := range rr.units {
		if hosts == "" || u.hosts == want {
			units = append(units, u)
		}
	}
	var done []*unitRollout
	cmd := func(raw []byte) ([]byte, error) {
		done = done[:0]
		rec, _, _ := rollout.Decode(raw, now)
		for _, u := range units {
			st, ok := rec.Rollouts[u.key]
			if !ok || st.Final() {
				continue
			}
			if action == "promote" {
				st = rollout.Promote(st, now, who)
			} else {
				st = rollout.Abort(st, now, who)
			}
			if err := rec.Put(u.key, st); err != nil {
				return nil, err
			}
			done = append(done, u)
		}
		if len(done) == 0 {
			return nil, nil
		}
		return rec.Encode()
	}
	var err error
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
	if len(done) == 0 {
		return rollout.ErrNoRollout
	}
	if action == "abort" {
		for _, u := range done {
			s.conn.RolledBack(rr.name, map[string]any{"hosts": catalog.ClipLabel(u.hosts), "why": "aborted by " + who})
		}
	}
	rr.look(now) // the weights now
	return nil
}
