package catalog

import (
	"strings"
	"sync/atomic"
	"time"
)

// Scale to zero driven by Caddy (Docker, which cannot wake on connect): an
// instance labelled caddy.standby_after has a Standby policy and an
// Activity. The catalog only keeps them; the connection that owns the
// daemon's write access decides when to wake and when to put on standby,
// through Catalog.Sleepers and Snapshot.WakeCandidates.

// Standby is an instance's scale-to-zero policy, from its labels.
type Standby struct {
	// After is caddy.standby_after; 0 when the label is absent or bad.
	After time.Duration
	// Pause is set by caddy.standby=pause: freeze instead of stop.
	Pause bool
}

// parseStandby reads the caddy.standby_after and caddy.standby labels; bad
// names the label whose value is not valid ("" when both are), in which
// case the instance is not Caddy's to stop or wake.
func parseStandby(labels map[string]string) (p Standby, bad string) {
	raw, ok := labels[LabelStandbyAfter]
	if !ok {
		return Standby{}, ""
	}
	d, err := time.ParseDuration(strings.TrimSpace(raw))
	if err != nil || d <= 0 {
		return Standby{}, LabelStandbyAfter
	}
	switch mode := strings.TrimSpace(labels[LabelStandby]); mode {
	case "", "stop":
	case "pause":
		p.Pause = true
	default:
		return Standby{}, LabelStandby
	}
	p.After = d
	return p, ""
}

// InFlight is a count of requests in flight to one upstream:
// reverse_proxy's *Host.
type InFlight interface{ NumRequests() int }

// Activity is what requests tell of an instance's use, kept across the
// instance's changes (by ID) for as long as it is labelled. The request
// path writes it with atomics only.
type Activity struct {
	// last is when a request was last routed to the instance (Unix nanos);
	// 0: never, since the catalog has known it or Reset.
	last atomic.Int64
	// pending counts requests routed to the instance whose InFlight is not
	// known yet (see Capture).
	pending atomic.Int32
	// counts are the InFlight counters of the dial addresses requests were
	// routed to.
	counts atomic.Pointer[[]dialCount]
}

type dialCount struct {
	dial  string
	count InFlight
}

// Touch records a request routed to the instance now; first reports the
// first since the instance was known or Reset.
func (a *Activity) Touch(now time.Time) (first bool) { return a.last.Swap(now.UnixNano()) == 0 }

// Reset forgets the last request: the instance is down.
func (a *Activity) Reset() { a.last.Store(0) }

// Last is when a request was last routed to the instance; zero if never.
func (a *Activity) Last() time.Time {
	if n := a.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Knows reports whether the InFlight counter of dial is known.
func (a *Activity) Knows(dial string) bool {
	if p := a.counts.Load(); p != nil {
		for _, c := range *p {
			if c.dial == dial {
				return true
			}
		}
	}
	return false
}

// Begin records a request whose InFlight counter is being captured: until
// the matching Learn, the instance counts as busy.
func (a *Activity) Begin() { a.pending.Add(1) }

// Learn ends a Begin, recording the InFlight counter of dial (nil: not
// known after all). At most a few dial addresses are kept, the latest.
func (a *Activity) Learn(dial string, count InFlight) {
	defer a.pending.Add(-1)
	if count == nil {
		return
	}
	for {
		old := a.counts.Load()
		var list []dialCount
		if old != nil {
			for _, c := range *old {
				if c.dial != dial {
					list = append(list, c)
				}
			}
		}
		list = append(list, dialCount{dial: dial, count: count})
		if len(list) > 4 {
			list = list[len(list)-4:]
		}
		if a.counts.CompareAndSwap(old, &list) {
			return
		}
	}
}

// Forget drops the known InFlight counters (the instance was woken: its
// addresses may have changed).
func (a *Activity) Forget() { a.counts.Store(nil) }

// InFlight is the number of requests in flight to the instance, as far as
// known: a request whose counter is not captured yet counts as one.
func (a *Activity) InFlight() int {
	n := int(a.pending.Load())
	if p := a.counts.Load(); p != nil {
		for _, c := range *p {
			n += c.count.NumRequests()
		}
	}
	return n
}

// Sleeper is an instance labelled caddy.standby_after, as Catalog.Sleepers
// reports it.
type Sleeper struct {
	ID, Name string
	Labels   map[string]string
	State    State
	Policy   Standby
	Activity *Activity
	// Seq orders what the catalog learnt of instances: the Seq of the
	// latest Put or Replace that described this one (see Catalog.Seq);
	// StartEvent and StopEvent that of the latest event saying it started,
	// and saying it stops (kill, die or stop on Docker), which come in the
	// daemon's order, unlike the descriptions fetched after them.
	Seq, StartEvent, StopEvent uint64
	// Ready: running, accepting connections (R1a) and not unhealthy or
	// awaiting its health verdict, whatever the network (R1).
	Ready bool
}

// Sleepers appends to dst every instance with a valid standby policy.
func (c *Catalog) Sleepers(dst []Sleeper) []Sleeper {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byID {
		if e.activity == nil {
			continue
		}
		dst = append(dst, Sleeper{
			ID: e.inst.ID, Name: e.inst.Name, Labels: e.inst.Labels, State: e.inst.State,
			Policy: e.standby, Activity: e.activity, Seq: e.seq, StartEvent: e.startEvent, StopEvent: e.stopEvent,
			Ready: e.inst.State == StateRunning && e.listening &&
				(e.inst.Health == HealthNone || e.inst.Health == HealthHealthy),
		})
	}
	return dst
}

// Seq is the number of the catalog's latest change from its daemon (Put,
// Replace, Started, Stopping): an instance's Sleeper.Seq, StartEvent or
// StopEvent above a Seq taken earlier came since.
func (c *Catalog) Seq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// WakeCandidate is an instance a request may wake (Docker scale to zero).
type WakeCandidate struct {
	ID, Name string
	Labels   map[string]string
	// State is StateStopped or StatePaused for one on standby,
	// StateStopping for one on its way there; else it is on its way up
	// (being woken).
	State    State
	Activity *Activity
}

// WakeCandidates appends to dst the instances with a standby policy that
// a request for host on route may wake, when none is routable (R5's order):
// first those on their way up (starting, or running and not ready yet),
// then those on standby (stopped or paused, or being stopped or paused),
// each group in name order.
// A restarting (crash-looping) or dead instance is never one.
func (s *Snapshot) WakeCandidates(dst []WakeCandidate, route Route, host string) []WakeCandidate {
	candidates, exact := s.candidates(route, host, false)
	for pass := 0; pass < 2; pass++ {
		for _, e := range candidates {
			if e.activity == nil || !e.servesHost(host, exact) {
				continue
			}
			if pass == 0 && e.wakingUp() || pass == 1 && e.sleeping() {
				dst = append(dst, WakeCandidate{ID: e.inst.ID, Name: e.inst.Name, Labels: e.inst.Labels, State: e.inst.State, Activity: e.activity})
			}
		}
	}
	return dst
}

// wakingUp reports an instance Caddy wakes (one with a standby policy) on
// its way up: starting, or running and not ready yet.
func (e *entry) wakingUp() bool {
	return e.activity != nil && (e.inst.State == StateStarting ||
		e.inst.State == StateRunning && (!e.listening || e.inst.Health == HealthStarting))
}

// sleeping reports an instance Caddy wakes (one with a standby policy) on
// standby: stopped or paused, or being put there by Caddy (woken once
// down).
func (e *entry) sleeping() bool {
	return e.activity != nil && (e.inst.State == StateStopped || e.inst.State == StatePaused ||
		e.inst.State == StateStopping && e.stopping)
}
