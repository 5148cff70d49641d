// Package heal restarts a Docker container stuck unhealthy (R1e): the
// Engine marks a container whose health check fails unhealthy and never
// restarts it (moby#28400). A container labelled caddy.heal is already
// out of rotation while unhealthy (R1); once it has been unhealthy for
// the label's value, Caddy restarts it, one log line each:
//
//   - caddy.heal=30s: unhealthy that long, as the catalog saw it (from
//     the event that made it unhealthy);
//   - caddy.heal=3: for that many of its health checks, taken as three
//     times its check's interval (one inspection, when it first turns
//     unhealthy; 30 s when the check sets none).
//
// The n-th restart in a row waits at least the label's time doubled n
// times after the one before (at most 10 minutes; the count starts over
// once the container stayed healthy 10 minutes), and a container is
// restarted at most heal_max_restarts times an hour (default 6; one
// warning when it reaches that). Of the containers sharing a host of
// caddy.host, one is restarted at a time (those without caddy.host are
// one group): a restart is in progress from the call until the
// container's next verdict, so two instances of a route are never
// restarted together. A container Caddy is waking or putting on standby
// (scale to zero, R5) is left to it. The state is the Engine's, shared by
// every connection to it (a Ledger).
package heal

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Actions are the Engine calls healing makes.
type Actions interface {
	// Restart restarts the container, which must be labelled caddy.heal.
	Restart(ctx context.Context, id string, labels map[string]string) error
	// HealthInterval is the interval of the container's health check
	// (DefaultInterval when it sets none).
	HealthInterval(ctx context.Context, id string) (time.Duration, error)
	// Denied reports an error that says the daemon refuses the write.
	Denied(err error) bool
}

// DefaultMaxRestarts is the heal_max_restarts setting's default: the most
// restarts of one container in any hour.
const DefaultMaxRestarts = 6

const (
	// busyRecheck is how soon a container whose restart waits for
	// another of its group (or for scale to zero) is looked at again.
	busyRecheck = time.Second
	// callTimeout bounds one restart call (the container's stop grace
	// included) or inspection.
	callTimeout = 2 * time.Minute
	// maxWarned bounds the bad values warned about.
	maxWarned = 1024
)

// The results of caddy_dicer_heals_total.
const (
	ResultRestarted = "restarted" // the Engine restarted it
	ResultDenied    = "denied"    // the Engine refused the write
	ResultError     = "error"     // the call failed otherwise
	ResultCapped    = "capped"    // due, but heal_max_restarts reached (once per reach)
)

// Options are one connection's healing settings.
type Options struct {
	Logger *zap.Logger
	// MaxRestarts is heal_max_restarts; 0: DefaultMaxRestarts.
	MaxRestarts int
	// Busy reports a container that scale to zero is waking or putting
	// on standby: not restarted meanwhile.
	Busy func(id string) bool
	// Counted, if set, hears each result (the heals metric).
	Counted func(result string)
	// Restarted, if set, hears each restart's instance and result
	// (restarted, denied, error) when the Engine answered: the
	// lifecycle event (R13e). It must not block.
	Restarted func(inst catalog.Instance, result string)
	// Clock is the clock; nil: time.Now. Tests step it.
	Clock func() time.Time
}

// Healer heals the containers of one connection: it sees them as the
// adapter reports them (Sink) and restarts the due ones.
type Healer struct {
	ctx     context.Context
	actions Actions
	ledger  *Ledger
	opts    Options
	now     func() time.Time

	mu      sync.Mutex
	tracked map[string]*tracked // the containers labelled caddy.heal, by ID
	warned  map[string]bool     // bad values warned about
	count   atomic.Int32        // len(tracked), read without mu
	kick    chan struct{}
	wg      sync.WaitGroup
}

// tracked is a labelled container as last reported.
type tracked struct {
	inst catalog.Instance
	spec spec
	bad  bool
	// group is its group (groupOf), read when its caddy.host changes.
	group []string
	// unhealthySince is when it was first seen unhealthy, zero while it
	// is not.
	unhealthySince time.Time
	// interval is its health check's, for a count (0: not known yet;
	// asking: being inspected).
	interval time.Duration
	asking   bool
}

// New heals the containers reported to it (see Sink) with actions,
// sharing ledger with the Engine's other connections, until ctx ends;
// Close waits for it.
func New(ctx context.Context, actions Actions, ledger *Ledger, opts Options) *Healer {
	h := newHealer(ctx, actions, ledger, opts)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.run()
	}()
	return h
}

// newHealer is New without its loop: tests call look themselves.
func newHealer(ctx context.Context, actions Actions, ledger *Ledger, opts Options) *Healer {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MaxRestarts <= 0 {
		opts.MaxRestarts = DefaultMaxRestarts
	}
	h := &Healer{
		ctx: ctx, actions: actions, ledger: ledger, opts: opts, now: time.Now,
		tracked: map[string]*tracked{}, warned: map[string]bool{}, kick: make(chan struct{}, 1),
	}
	if opts.Clock != nil {
		h.now = opts.Clock
	}
	return h
}

// Close waits for the loop and the calls in progress; call it once ctx
// is done.
func (h *Healer) Close() { h.wg.Wait() }

// run looks at the containers whenever one changes or one is due.
func (h *Healer) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(h.look(h.now()))
		select {
		case <-h.kick:
		case <-timer.C:
		case <-h.ctx.Done():
			return
		}
	}
}

func (h *Healer) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Observe takes the adapter's report of a container. One without the
// label costs an atomic load while none is tracked.
func (h *Healer) Observe(inst catalog.Instance) {
	raw, labelled := inst.Labels[catalog.LabelHeal]
	if !labelled && h.count.Load() == 0 {
		return
	}
	now := h.now()
	h.mu.Lock()
	t := h.tracked[inst.ID]
	if !labelled {
		if t != nil {
			h.untrack(inst.ID)
		}
		h.mu.Unlock()
		return
	}
	if t == nil || t.inst.Labels[catalog.LabelHeal] != raw {
		t = &tracked{}
		t.spec, t.bad = h.parse(inst, raw)
		h.tracked[inst.ID] = t
		h.count.Store(int32(len(h.tracked)))
	}
	if t.group == nil || t.inst.Labels[catalog.LabelHost] != inst.Labels[catalog.LabelHost] {
		t.group = groupOf(inst.Labels)
	}
	t.inst = inst
	if inst.State == catalog.StateRunning && inst.Health == catalog.HealthUnhealthy {
		if t.unhealthySince.IsZero() {
			t.unhealthySince = now
		}
	} else {
		t.unhealthySince = time.Time{}
	}
	h.mu.Unlock()
	h.ledger.observe(inst, now)
	h.poke()
}

// Delete takes the adapter's report that a container was removed.
func (h *Healer) Delete(id string) {
	h.mu.Lock()
	h.untrack(id)
	h.mu.Unlock()
	h.ledger.gone(id)
}

// Replace takes a full listing.
func (h *Healer) Replace(instances []catalog.Instance) {
	listed := make(map[string]bool, len(instances))
	for _, inst := range instances {
		listed[inst.ID] = true
	}
	var gone []string
	h.mu.Lock()
	for id := range h.tracked {
		if !listed[id] {
			h.untrack(id)
			gone = append(gone, id)
		}
	}
	h.mu.Unlock()
	for _, id := range gone {
		h.ledger.gone(id) // removed while no event said so
	}
	for _, inst := range instances {
		h.Observe(inst)
	}
}

// untrack forgets a container; h.mu is held.
func (h *Healer) untrack(id string) {
	delete(h.tracked, id)
	h.count.Store(int32(len(h.tracked)))
}

// parse reads a container's caddy.heal; a bad value is warned about once
// per value (h.mu is held).
func (h *Healer) parse(inst catalog.Instance, raw string) (spec, bool) {
	s, err := parseSpec(raw)
	if err == nil {
		return s, false
	}
	if !h.warned[raw] && len(h.warned) < maxWarned {
		h.warned[raw] = true
		h.opts.Logger.Warn("label ignored: the container is not healed", zap.String("instance", inst.Name), zap.Error(err))
	}
	return spec{}, true
}

// due is a container due for a restart.
type due struct {
	id    string
	t     *tracked
	after time.Duration
	at    time.Time // when it fell due
	last  time.Time // its last restart within the hour (zero: none)
}

// look restarts the containers due at now, in their groups' line (R1e),
// and returns how soon to look again.
func (h *Healer) look(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := time.Hour
	var dues []due
	for id, t := range h.tracked {
		if t.bad || t.unhealthySince.IsZero() {
			continue
		}
		after, known := h.afterOf(id, t)
		if !known {
			continue // its interval is being asked for: a poke follows
		}
		at := t.unhealthySince.Add(after)
		if now.Before(at) {
			next = min(next, at.Sub(now))
			continue
		}
		if h.opts.Busy != nil && h.opts.Busy(id) {
			next = min(next, busyRecheck) // scale to zero owns it (R5)
			continue
		}
		dues = append(dues, due{id: id, t: t, after: after, at: at, last: h.ledger.lastRestart(id, now)})
	}
	slices.SortFunc(dues, func(a, b due) int {
		if first(a.last, a.at, a.id, b.last, b.at, b.id) {
			return -1
		}
		return 1
	})
	for _, d := range dues {
		id, t := d.id, d.t
		c := h.ledger.claim(id, t.group, d.after, h.opts.MaxRestarts, d.at, now)
		switch c.verdict {
		case waiting:
			next = min(next, c.at.Sub(now))
		case capped:
			if c.warn {
				h.opts.Logger.Warn("container unhealthy, not restarted: heal_max_restarts reached",
					zap.String("instance", t.inst.Name), zap.Int("restarts_last_hour", c.lastHour),
					zap.Int("heal_max_restarts", h.opts.MaxRestarts), zap.Time("next_restart_at", c.at))
				h.counted(ResultCapped)
			}
			next = min(next, c.at.Sub(now))
		case busy:
			next = min(next, busyRecheck)
		case claimed:
			h.opts.Logger.Info("restarting unhealthy container",
				zap.String("instance", t.inst.Name), zap.String(catalog.LabelHeal, t.inst.Labels[catalog.LabelHeal]),
				zap.Duration("unhealthy_for", now.Sub(t.unhealthySince).Round(time.Millisecond)),
				zap.Int("attempt", c.attempt), zap.Duration("next_backoff", c.next), zap.Int("restarts_last_hour", c.lastHour))
			t.unhealthySince = time.Time{} // counts again from its next verdict
			h.restart(t.inst)
		}
	}
	return max(next, 0)
}

// afterOf is how long t stays unhealthy before its restart; for a count
// whose interval is not known yet it asks the Engine and says so (h.mu
// is held).
func (h *Healer) afterOf(id string, t *tracked) (time.Duration, bool) {
	if t.spec.count == 0 {
		return t.spec.after, true
	}
	if t.interval > 0 {
		return t.spec.afterFor(t.interval), true
	}
	if !t.asking {
		t.asking = true
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ctx, cancel := context.WithTimeout(h.ctx, callTimeout)
			defer cancel()
			interval, err := h.actions.HealthInterval(ctx, id)
			if err != nil || interval <= 0 {
				interval = DefaultInterval
			}
			h.mu.Lock()
			t.interval, t.asking = interval, false
			h.mu.Unlock()
			h.poke()
		}()
	}
	return 0, false
}

// restart calls the Engine in the background; its ledger claim is held.
func (h *Healer) restart(inst catalog.Instance) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, callTimeout)
		defer cancel()
		err := h.actions.Restart(ctx, inst.ID, inst.Labels)
		h.ledger.done(inst.ID, err != nil, h.now())
		result := ResultRestarted
		switch {
		case err == nil:
		case h.actions.Denied(err):
			result = ResultDenied
			h.opts.Logger.Warn("restart of unhealthy container refused by the Engine", zap.String("instance", inst.Name), zap.Error(err))
		default:
			result = ResultError
			h.opts.Logger.Warn("restart of unhealthy container failed", zap.String("instance", inst.Name), zap.Error(err))
		}
		h.counted(result)
		if h.opts.Restarted != nil && h.ctx.Err() == nil {
			h.opts.Restarted(inst, result)
		}
		h.poke()
	}()
}

func (h *Healer) counted(result string) {
	if h.opts.Counted != nil {
		h.opts.Counted(result)
	}
}

// Sink is cat, with h told of every container the adapter reports after
// cat (the catalog first, so routes see a change before healing does).
func Sink(cat *catalog.Catalog, h *Healer) catalog.Sink { return sink{cat, h} }

type sink struct {
	*catalog.Catalog
	h *Healer
}

func (s sink) Put(inst catalog.Instance) {
	s.Catalog.Put(inst)
	s.h.Observe(inst)
}

func (s sink) Delete(id string) {
	s.Catalog.Delete(id)
	s.h.Delete(id)
}

func (s sink) Replace(instances []catalog.Instance) {
	s.Catalog.Replace(instances)
	s.h.Replace(instances)
}

// Interface guards
var (
	_ catalog.Sink            = sink{}
	_ catalog.StoppingBecause = sink{}
)
