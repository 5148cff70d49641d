package swarm

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/swarm"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Pools that grow under load on Swarm (R5j): a replicated service
// labelled caddy.max_replicas gains one replica while every routable task
// of a route is past its caddy.soft_limit, and loses one once its load has
// fitted in one replica fewer for its caddy.standby_after. These are the
// adapter's only writes, and only to the replica count of such a service.

const (
	// DefaultScaleDownAfter is how long a service's load must fit in one
	// replica fewer before Caddy takes one away, when the service has no
	// valid caddy.standby_after.
	DefaultScaleDownAfter = 5 * time.Minute
	// DefaultScaleSample is how often the Scaler reads each scaled
	// service's load for the scale down.
	DefaultScaleSample = time.Second
	// growEvery is the least time between two looks at one service for
	// growth (an inspect and a task list each), however many requests
	// find its tasks past their soft limit.
	growEvery = 500 * time.Millisecond
	// scaleCallTimeout bounds one look and write.
	scaleCallTimeout = 30 * time.Second
)

// scaleEngine is the part of the Engine API the Scaler uses.
type scaleEngine interface {
	ServiceInspectWithRaw(ctx context.Context, serviceID string, options swarm.ServiceInspectOptions) (swarm.Service, []byte, error)
	ServiceUpdate(ctx context.Context, serviceID string, version swarm.Version, service swarm.ServiceSpec, options swarm.ServiceUpdateOptions) (swarm.ServiceUpdateResponse, error)
	TaskList(ctx context.Context, options swarm.TaskListOptions) ([]swarm.Task, error)
	Close() error
}

// ScaleOptions are a Scaler's settings.
type ScaleOptions struct {
	// Grew, if set, hears each replica added (the
	// caddy_dicer_wakes_started_total{cause="load"} metric).
	Grew func()
	// Sample is how often load is read for the scale down; 0:
	// DefaultScaleSample.
	Sample time.Duration
	// Clock is the clock; nil: time.Now. Tests step it.
	Clock func() time.Time
	// Book, if set, is the load of the other Scalers of this process on
	// the same swarm (LoadBook): set it whenever several connections may
	// follow one swarm. Release, if set, is called once the Scaler is
	// closed (to let go of the book).
	Book    *LoadBook
	Release func()

	// afterLook and afterSample, if set, hear the end of each look at a
	// service and of each sample (tests). They are options, not fields
	// set on the Scaler, because its loop reads them from its start.
	afterLook, afterSample func()
}

// Scaler scales the services of one connection's catalog (R5j). Grow is
// called on the request path; a loop of its own scales down.
type Scaler struct {
	eng    scaleEngine
	cat    *catalog.Catalog
	index  *scaleIndex
	log    *zap.Logger
	grew   func()
	now    func() time.Time
	sample time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	states map[string]*scaleState // by service ID
	closed bool                   // Close was called: no more looks

	// afterLook and afterSample: ScaleOptions', fixed before any
	// goroutine of the Scaler starts.
	afterLook, afterSample func()

	// fleet, if set, is the fleet the load is shared with (fleet.go).
	fleet atomic.Pointer[fleetHook]
	// book and release are ScaleOptions'.
	book    *LoadBook
	release func()
}

// scaleState is the Scaler's own state of one service, under its mu.
type scaleState struct {
	busy     bool      // a look or write is under way
	failing  bool      // its last write failed, and was warned about
	next     time.Time // no look for growth before
	fitSince time.Time // since when its load fits in one replica fewer; zero: it does not
}

// Scaler returns the scaler of the services this adapter's sessions list
// into cat, with endpoint tasks (nil with vip: the load of a VIP is not
// a task's). Close it once done.
func (a *Adapter) Scaler(cat *catalog.Catalog, log *zap.Logger, opts ScaleOptions) (*Scaler, error) {
	if a.endpoint != EndpointTasks {
		return nil, nil
	}
	cli, err := a.docker.NewClient()
	if err != nil {
		return nil, err
	}
	var eng scaleEngine = cli
	if a.wrap != nil {
		eng = a.wrap(cli).(scaleEngine)
	}
	s := &Scaler{eng: eng, cat: cat, index: a.index, log: log, grew: opts.Grew, now: time.Now,
		sample: opts.Sample, states: map[string]*scaleState{}, afterLook: opts.afterLook, afterSample: opts.afterSample,
		book: opts.Book, release: opts.Release}
	if opts.Clock != nil {
		s.now = opts.Clock
	}
	if s.sample <= 0 {
		s.sample = DefaultScaleSample
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.shrinkLoop()
	}()
	return s, nil
}

// Close stops the Scaler, waits for its calls and closes its client.
func (s *Scaler) Close() {
	s.mu.Lock()
	s.closed = true // a request still in GetUpstreams starts nothing
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	_ = s.eng.Close()
	if s.book != nil {
		s.book.leave(s)
	}
	if s.release != nil {
		s.release()
	}
}

// Grow is called with a route's routable targets for a request: when
// every one is past its soft limit (catalog.Loaded) and one of their
// services is to scale, it has that service looked at in the background,
// and a replica added if the service may grow (see grow). It reads
// atomics only unless the targets are loaded.
func (s *Scaler) Grow(targets []catalog.Target) {
	if !catalog.Loaded(targets) {
		return
	}
	id, routable := s.index.pick(targets)
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(id)
	now := s.now()
	if s.closed || st.busy || now.Before(st.next) {
		return
	}
	st.busy, st.next = true, now.Add(growEvery)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.grow(id, routable)
	}()
}

// stateLocked returns the state of the service id; s.mu is held.
func (s *Scaler) stateLocked(id string) *scaleState {
	st := s.states[id]
	if st == nil {
		st = &scaleState{}
		s.states[id] = st
	}
	return st
}

// done ends a look at the service id; changed says a replica was added
// or taken away: the load's fit is measured afresh.
func (s *Scaler) done(id string, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(id)
	st.busy = false
	if changed {
		st.fitSince = time.Time{}
	}
	if s.afterLook != nil {
		s.afterLook()
	}
}

// grow adds one replica to the service id if it may grow: replicated,
// labelled caddy.max_replicas and below it, not converging (no task
// starting or stopping, no update under way, as many tasks as replicas),
// and with every task routable (routable, of the route that saw the
// load). The write names the version inspected: of several Caddys that
// see the load at once, one adds the replica and Swarm refuses the
// others' stale version, which is no error.
func (s *Scaler) grow(id string, routable int) {
	changed := false
	defer func() { s.done(id, changed) }()
	svc, cur, policy, ok := s.inspect(id)
	if !ok || cur >= policy.Max || routable < cur {
		return
	}
	changed = s.update(svc, cur, cur+1, "every routable task is past its caddy.soft_limit: one replica more")
	if changed && s.grew != nil {
		s.grew()
	}
}

// shrink takes one replica away from the service id if its fresh state
// allows it: above its caddy.min_replicas, not converging, and not
// updated (by any Caddy, for growth) for after.
// load is the requests in flight at the sample that decided it (logged).
func (s *Scaler) shrink(id string, after time.Duration, load int) {
	changed := false
	defer func() { s.done(id, changed) }()
	svc, cur, policy, ok := s.inspect(id)
	if !ok || cur <= policy.Min || s.now().Sub(svc.UpdatedAt) < after {
		return
	}
	changed = s.update(svc, cur, cur-1, "the load has fitted in one replica fewer for caddy.standby_after: one replica less",
		zap.Int("load", load), zap.Int("soft_limit", policy.SoftLimit))
}

// inspect reads the service id and its tasks: ok only if it is a
// replicated service labelled caddy.max_replicas that is not converging.
func (s *Scaler) inspect(id string) (svc swarm.Service, replicas int, policy catalog.Replicas, ok bool) {
	ctx, cancel := context.WithTimeout(s.ctx, scaleCallTimeout)
	defer cancel()
	svc, _, err := s.eng.ServiceInspectWithRaw(ctx, id, swarm.ServiceInspectOptions{})
	if err != nil {
		s.log.Debug("scaling: the service could not be inspected", zap.String("service_id", id), zap.Error(err))
		return svc, 0, policy, false
	}
	policy, _ = catalog.ParseReplicas(svc.Spec.Labels)
	sv := fromService(svc)
	if policy.Max == 0 || sv.replicas < 0 || sv.updating {
		return svc, 0, policy, false
	}
	tasks, err := s.eng.TaskList(ctx, swarm.TaskListOptions{Filters: filters.NewArgs(filters.Arg("service", id))})
	if err != nil {
		s.log.Debug("scaling: the service's tasks could not be listed", zap.String("service", sv.name), zap.Error(err))
		return svc, 0, policy, false
	}
	if _, converging := translateService(sv, tasks, nil, EndpointTasks); converging {
		return svc, 0, policy, false
	}
	return svc, sv.replicas, policy, true
}

// update writes the service's replica count from cur to n, at the
// version inspected; it reports whether Swarm took it.
func (s *Scaler) update(svc swarm.Service, cur, n int, why string, fields ...zap.Field) bool {
	ctx, cancel := context.WithTimeout(s.ctx, scaleCallTimeout)
	defer cancel()
	spec := svc.Spec
	rep := *spec.Mode.Replicated
	count := uint64(n)
	rep.Replicas = &count
	spec.Mode.Replicated = &rep
	_, err := s.eng.ServiceUpdate(ctx, svc.ID, svc.Version, spec, swarm.ServiceUpdateOptions{})
	switch {
	case err != nil && StaleVersion(err):
		s.log.Debug("scaling: another writer changed the service first", zap.String("service", svc.Spec.Name))
		return false
	case err != nil && s.ctx.Err() == nil:
		level := zap.DebugLevel
		if s.failing(svc.ID, true) {
			level = zap.WarnLevel // once until a write goes through: not one a look under load
		}
		s.log.Log(level, "scaling: the service could not be updated (the Engine API must allow POST /services/{id}/update)",
			zap.String("service", svc.Spec.Name), zap.Int("replicas", cur), zap.Int("to", n), zap.Error(err))
		return false
	case err != nil:
		return false
	}
	s.failing(svc.ID, false)
	s.log.Info(why, append([]zap.Field{zap.String("service", svc.Spec.Name), zap.Int("replicas", cur), zap.Int("to", n)}, fields...)...)
	return true
}

// failing records whether the last write to the service id failed, and
// reports whether that is news (to warn about).
func (s *Scaler) failing(id string, failed bool) (news bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(id)
	news = failed && !st.failing
	st.failing = failed
	return news
}

// StaleVersion reports Swarm's refusal of a write at a version that is
// not the service's latest.
func StaleVersion(err error) bool { return strings.Contains(err.Error(), "update out of sequence") }

// shrinkLoop reads every scaled service's load each sample, until Close.
func (s *Scaler) shrinkLoop() {
	tick := time.NewTicker(s.sample)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
			s.considerShrinking()
			if s.afterSample != nil {
				s.afterSample()
			}
		}
	}
}

// considerShrinking takes one replica away from each service whose load
// (requests in flight through this Caddy to its tasks, and through the
// other Caddys of a fleet) has fitted in one replica fewer, by its soft
// limit, for its caddy.standby_after.
func (s *Scaler) considerShrinking() {
	svcs := s.index.scaledServices(nil)
	if len(svcs) == 0 {
		return
	}
	load := s.loadByService()
	if s.book != nil {
		s.book.share(s, load) // this Caddy's other connections to the swarm (LoadBook)
	}
	s.shareLoad(svcs, load) // a fleet's load (R5j, fleet.go)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, sv := range svcs {
		st := s.stateLocked(sv.id)
		fits := sv.policy.SoftLimit > 0 && sv.replicas > sv.policy.Min && load[sv.id] <= sv.policy.SoftLimit*(sv.replicas-1)
		if !fits {
			st.fitSince = time.Time{}
			continue
		}
		if st.fitSince.IsZero() {
			st.fitSince = now
		}
		after := sv.policy.After
		if after <= 0 {
			after = DefaultScaleDownAfter
		}
		if st.busy || now.Sub(st.fitSince) < after {
			continue
		}
		st.busy = true
		s.wg.Add(1)
		go func(load int) {
			defer s.wg.Done()
			s.shrink(sv.id, after, load)
		}(load[sv.id])
	}
}

// loadByService sums the requests in flight to the tasks of each service
// to scale.
func (s *Scaler) loadByService() map[string]int {
	return s.index.load(s.cat.Sleepers(nil))
}
