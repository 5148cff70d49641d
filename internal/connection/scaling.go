package connection

import (
	"context"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/heal"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
)

// Scaling is how a daemon's instances wake and its pools grow under load
// (R5, R5j), chosen once when the connection is made:
//
//   - Standby: Caddy wakes an instance on standby itself (Docker: start or
//     unpause) and puts idle ones on standby, through internal/standby;
//   - WakeOnConnect: the daemon wakes an instance on standby when a
//     connection reaches its published port (Dicer), and a loaded pool
//     grows by such a connection (internal/connectwake);
//   - Replicas: a loaded pool grows by a service's replicas (Swarm,
//     internal/swarm);
//   - the zero Scaling: nothing wakes or grows.
type Scaling struct {
	mode     scalingMode
	actions  standby.Actions
	options  standby.Options
	shared   SharedEngine
	replicas func(cat *catalog.Catalog, grew func()) (*swarm.Scaler, error)
	// heal: restart containers labelled caddy.heal (R1e), at most
	// healMax times an hour each.
	heal    bool
	healMax int
}

type scalingMode uint8

const (
	scaleNone scalingMode = iota
	scaleStandby
	scaleOnConnect
	scaleReplicas
)

// SharedEngine returns the scale-to-zero state of one Engine that every
// connection to it shares (R5f), made with actions by the first, and the
// func that gives it back.
type SharedEngine func(actions standby.Actions) (eng *standby.Engine, release func(), err error)

// Standby is the Scaling of a daemon whose instances Caddy wakes and puts
// on standby with actions (Docker); opts are the connection's max_wakes
// and max_held (R5d). shared, if not nil, gives the Engine's state shared
// with its other connections (R5f); nil: the connection's own.
func Standby(actions standby.Actions, opts standby.Options, shared SharedEngine) Scaling {
	return Scaling{mode: scaleStandby, actions: actions, options: opts, shared: shared}
}

// Healing is s (Standby) that also heals containers labelled caddy.heal
// (R1e) with its actions, restarting one at most maxPerHour times an hour
// (0: heal.DefaultMaxRestarts). Only a Standby Scaling whose actions can
// restart heals: Swarm replaces unhealthy tasks itself, and Dicer reports
// no health verdict.
func (s Scaling) Healing(maxPerHour int) Scaling {
	s.heal, s.healMax = true, maxPerHour
	return s
}

// WakeOnConnect is the Scaling of a daemon that wakes an instance on
// standby when a connection reaches its published port (Dicer).
func WakeOnConnect() Scaling { return Scaling{mode: scaleOnConnect} }

// Replicas is the Scaling of a daemon whose pools grow and shrink by a
// service's replica count (Swarm): make makes the scaler for the
// connection's catalog; grew hears each replica added.
func Replicas(make func(cat *catalog.Catalog, grew func()) (*swarm.Scaler, error)) Scaling {
	return Scaling{mode: scaleReplicas, replicas: make}
}

// scaler is a connection's Scaling made: one of its pointers is set, as
// mode says. (Concrete types, switched on: through an interface, the
// targets the request path passes to grow would escape, an allocation per
// request.)
type scaler struct {
	mode     scalingMode
	standby  *standby.Waker
	release  func()
	grower   *connectwake.Grower
	replicas *swarm.Scaler
	healer   *heal.Healer // Standby healing (R1e); nil without
}

// make makes s for connection c.
func (s Scaling) make(ctx context.Context, c *Conn) (scaler, error) {
	out := scaler{mode: s.mode}
	switch s.mode {
	case scaleStandby:
		opts := s.options
		opts.Counted = func(r standby.WakeResult) { c.metrics.wakes(string(r)).Inc() }
		opts.Started = func(cause standby.WakeCause) { c.metrics.wakesStarted(cause).Inc() } // R5j, R5k
		opts.Events = c.events                                                               // R13e
		if s.shared == nil {
			out.standby = standby.New(ctx, s.actions, c.catalog, c.logger, opts)
		} else {
			eng, release, err := s.shared(s.actions)
			if err != nil {
				return scaler{}, err
			}
			out.standby, out.release = standby.Join(ctx, eng, c.catalog, c.logger, opts), release
		}
		if ha, ok := s.actions.(heal.Actions); ok && s.heal {
			out.healer = heal.New(ctx, ha, out.standby.HealLedger(), heal.Options{
				Logger: c.logger, MaxRestarts: s.healMax, Busy: out.standby.Busy,
				Counted: func(result string) { c.metrics.heals(result).Inc() },
				Restarted: func(inst catalog.Instance, result string) { // R13e
					if c.events.Listens(lifecycle.HealRestart) {
						c.events.EmitID(lifecycle.HealRestart, inst.ID, inst.Name, map[string]any{"result": result})
					}
				},
			})
		}
	case scaleOnConnect:
		started := c.metrics.wakesStarted(standby.CauseLoad)
		out.grower = connectwake.New(ctx, connectwake.Options{Logger: c.logger, Started: started.Inc})
	case scaleReplicas:
		var err error
		if out.replicas, err = s.replicas(c.catalog, func() { c.metrics.wakesStarted(standby.CauseLoad).Inc() }); err != nil {
			return scaler{}, err
		}
		if out.replicas == nil {
			out.mode = scaleNone // endpoint vip: no task's load to scale by
		}
	}
	return out, nil
}

func (s scaler) close() {
	switch s.mode {
	case scaleStandby:
		if s.healer != nil {
			s.healer.Close()
		}
		s.standby.Close()
		if s.release != nil {
			s.release()
		}
	case scaleOnConnect:
		s.grower.Close()
	case scaleReplicas:
		s.replicas.Close()
	}
}

// WakesOnRequest reports whether Caddy wakes the daemon's instances itself
// (Scaling Standby): a request that finds nothing routable may wait for
// one (Hold).
func (c *Conn) WakesOnRequest() bool { return c.scale.mode == scaleStandby }

// Grow wakes the next instance on standby of route for host when every
// one of targets, its routable instances, is past its caddy.soft_limit
// (R5j): atomics only unless they all are.
func (c *Conn) Grow(snap *catalog.Snapshot, route catalog.Route, host string, targets []catalog.Target) {
	switch c.scale.mode {
	case scaleStandby:
		c.scale.standby.Grow(snap, route, host, targets)
	case scaleOnConnect:
		c.scale.grower.Grow(snap, route, host, targets)
	case scaleReplicas:
		c.scale.replicas.Grow(targets)
	}
}

// Routed notes a request routed to dial, an instance with the Activity a
// (labelled caddy.standby_after or caddy.soft_limit), and reports whether
// the caller should learn the in-flight count of dial when the request
// ends (catalog.Activity.Begin): for the first request to it and one per
// catalog.RelearnEvery. Atomics only, no lock.
func (c *Conn) Routed(a *catalog.Activity, dial string) (learn bool) {
	switch c.scale.mode {
	case scaleStandby:
		return c.scale.standby.Routed(a, dial)
	case scaleOnConnect, scaleReplicas:
		return a.Learning(dial, time.Now())
	}
	return false
}

// Hold wakes an instance for route and host when none is routable and
// waits for it, at most timeout (standby.Waker.Hold); it returns the
// targets then, or none and how long the client should wait before it
// retries. A daemon Caddy does not wake instances of: none, 0.
func (c *Conn) Hold(ctx context.Context, route catalog.Route, host string, timeout time.Duration, dst []catalog.Target) ([]catalog.Target, time.Duration) {
	if c.scale.mode != scaleStandby {
		return nil, 0
	}
	c.learned.learn(route, host) // a later ClientHello for host may pre-wake (R5n)
	return c.scale.standby.Hold(ctx, route, host, timeout, dst)
}

// StandIn is the dial address of the stand-in that answers 503 with this
// Retry-After (R5e, standby.Waker.StandIn); "" if there is none.
func (c *Conn) StandIn(retry time.Duration) string {
	if c.scale.mode != scaleStandby {
		return ""
	}
	return c.scale.standby.StandIn(retry)
}

// WakeBackoff is the wake backoff of instance id (standby.Waker.WakeBackoff):
// zero on a daemon Caddy does not wake instances of.
func (c *Conn) WakeBackoff(id string) (after time.Time, failures int, waking bool) {
	if c.scale.mode != scaleStandby {
		return time.Time{}, 0, false
	}
	return c.scale.standby.WakeBackoff(id)
}

// Target is an instance a whole connection may go to (the layer-4
// handler, R14): where to dial it and its name. Pass it back to Opened
// once a connection to it is open.
type Target struct {
	// Dial is the address to connect to, host:port.
	Dial string
	// Instance is the instance's name, for logs.
	Instance string

	activity *catalog.Activity
}

// TargetOf is the Target of a catalog target.
func TargetOf(t catalog.Target) Target {
	return Target{Dial: t.Dial, Instance: t.Instance, activity: t.Activity}
}

// Opened records a connection open to t, which keeps its instance from
// going on standby while it lasts (an open connection is activity,
// however long it stays quiet: R5, R14b); call the returned func once it
// closes.
func (c *Conn) Opened(t Target) (closed func()) {
	a, dial := t.activity, t.Dial
	if a == nil || c.scale.mode != scaleStandby {
		return func() {}
	}
	c.scale.standby.Routed(a, dial)
	busy := a.Begin() // in flight until Learn
	return func() {
		busy.Learn(dial, nil)
		a.Touch(time.Now()) // idle counts from the close
	}
}

// waking reports whether the connection is waking the instance id, for
// whatever cause: its readiness probe takes the fast path (probeWoken).
func (c *Conn) waking(id string) bool {
	switch c.scale.mode {
	case scaleStandby:
		return c.scale.standby.Waking(id)
	case scaleOnConnect:
		return c.scale.grower.Waking(id)
	}
	return false
}
