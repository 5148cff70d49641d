package catalog

import (
	"slices"
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
	// CPU is caddy.standby_cpu (R5r, activity.go): kept awake while its
	// CPU, in percent of one core, is above it; 0 when absent or bad.
	CPU float64
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

// RelearnEvery is how often the InFlight counter of a dial address is
// learnt again from a request (see Activity.Learning). reverse_proxy drops
// the counter of a dynamic upstream after an hour without a request to it
// and makes a new one at the next: a request after that long is always one
// that learns.
const RelearnEvery = 10 * time.Minute

// maxDials is how many dial addresses' counters an Activity keeps besides
// those with requests in flight.
const maxDials = 4

// Activity is what requests tell of an instance's use, kept across the
// instance's changes (by ID) for as long as it is labelled. The request
// path writes it with atomics only.
//
// Several catalogs may follow one daemon (routes whose connection settings
// differ): the Activity of each catalog's entry for one instance is then
// linked to one shared Activity (Link), so that a request through any of
// them counts for all (R5f).
//
// Make one with NewActivity: the zero Activity has no origin for its
// times.
type Activity struct {
	// origin is when the Activity was made: a reading of the monotonic
	// clock, from which its times count (see at), so that a step of the
	// wall clock never makes an instance look idle.
	origin time.Time
	// last is when a request was last routed to the instance, as at
	// gives it; 0: never, since the catalog has known it or Reset.
	last atomic.Int64
	// learnt is when a request last started learning a counter (as at
	// gives it); 0: never, as for an Activity just linked to (whose
	// first request learns again, as it did while the times counted
	// from the process's start).
	learnt atomic.Int64
	// pending counts requests routed to the instance whose InFlight is
	// not known yet (see Begin).
	pending atomic.Int32
	// counts are the InFlight counters requests were routed to, by dial
	// address: the latest of each of at most maxDials addresses, and every
	// older one while it has requests in flight.
	counts atomic.Pointer[[]dialCount]
	// link, once set, is the shared Activity this one stands for.
	link atomic.Pointer[Activity]
	// linked are the Activities linked to this one, whose own counts of
	// requests begun before the link still run.
	linked atomic.Pointer[[]*Activity]
	// fleet is the requests the other Caddys of a fleet have in flight to
	// the instance, as last read from their leases (R5j, R5m): Load adds
	// them.
	fleet atomic.Int32
}

type dialCount struct {
	dial  string
	count InFlight
}

// NewActivity returns an Activity with no request yet, whose times count
// from now on the monotonic clock.
func NewActivity() *Activity { return &Activity{origin: time.Now()} }

// at is t as nanoseconds since a's origin on the monotonic clock, never 0
// (never): plus one from the origin on, as it is before it (the time of
// an Activity linked to a, made earlier). A t without a monotonic reading
// counts on the wall clock.
func (a *Activity) at(t time.Time) int64 {
	d := int64(t.Sub(a.origin))
	if d < 0 {
		return d
	}
	return d + 1
}

// time is the time that n, a value of at, stands for.
func (a *Activity) time(n int64) time.Time {
	if n > 0 {
		n--
	}
	return a.origin.Add(time.Duration(n))
}

// root is the Activity that this one's requests count in.
func (a *Activity) root() *Activity {
	if l := a.link.Load(); l != nil {
		return l
	}
	return a
}

// Link makes a stand for shared from now on: Touch, Begin, Last and
// InFlight go to shared, which takes a's last request and keeps counting
// a's requests in flight until they end. Linking to itself, or linking a
// second time, does nothing. Callers serialize Link and Unlink.
func (a *Activity) Link(shared *Activity) {
	if shared == nil || shared == a || shared.link.Load() != nil || a.link.Load() != nil {
		return
	}
	list := []*Activity{a}
	if old := shared.linked.Load(); old != nil {
		list = append(list, *old...)
	}
	shared.linked.Store(&list) // first: a request Begun on a now counts there
	a.link.Store(shared)
	if n := a.last.Load(); n != 0 {
		storeLatest(&shared.last, shared.at(a.time(n)))
	}
}

// Unlink drops a's place in the shared Activity it was linked to (its
// catalog forgot the instance): its own count no longer adds there.
func (a *Activity) Unlink() {
	shared := a.link.Load()
	if shared == nil {
		return
	}
	old := shared.linked.Load()
	if old == nil {
		return
	}
	list := make([]*Activity, 0, len(*old))
	for _, l := range *old {
		if l != a {
			list = append(list, l)
		}
	}
	shared.linked.Store(&list)
}

// storeLatest stores n, a time as at gives it, in v, unless v holds a
// later one (0, never, is earlier than any).
func storeLatest(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if old != 0 && n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// Touch records a request routed to the instance now; first reports the
// first since the instance was known or Reset.
func (a *Activity) Touch(now time.Time) (first bool) {
	r := a.root()
	first = r.last.Swap(r.at(now)) == 0
	if l := a.link.Load(); l != nil && l != r {
		storeLatest(&l.last, l.at(now)) // linked meanwhile
	}
	return first
}

// TouchAfter is Touch that also reports whether the request before this
// one was at least quiet ago (or there was none): the first use after a
// pause, which a fleet's lease publisher hears of at once (R5m). The same
// atomics as Touch.
func (a *Activity) TouchAfter(now time.Time, quiet time.Duration) (first, afterQuiet bool) {
	r := a.root()
	n := r.at(now)
	prev := r.last.Swap(n)
	if l := a.link.Load(); l != nil && l != r {
		storeLatest(&l.last, l.at(now)) // linked meanwhile
	}
	return prev == 0, prev == 0 || n-prev >= int64(quiet)
}

// Reset forgets the last request: the instance is down.
func (a *Activity) Reset() { a.root().last.Store(0) }

// Last is when a request was last routed to the instance, with a monotonic
// clock reading (compare it with time.Now, time.Since); zero if never.
func (a *Activity) Last() time.Time {
	r := a.root()
	if n := r.last.Load(); n != 0 {
		return r.time(n)
	}
	return time.Time{}
}

// Learning reports whether a request routed to dial now is to learn its
// InFlight counter (Begin, then Learn once it is known): when none is
// known for dial, and for one request per RelearnEvery, so that a counter
// reverse_proxy made anew is known from its first request on.
func (a *Activity) Learning(dial string, now time.Time) bool {
	r := a.root()
	n := r.at(now)
	last := r.learnt.Load()
	if r.knows(dial) && last != 0 && n-last < int64(RelearnEvery) {
		return false
	}
	return r.learnt.CompareAndSwap(last, n) || !r.knows(dial)
}

// knows reports whether a counter of dial is known to a (a root), or to
// an Activity linked to it.
func (a *Activity) knows(dial string) bool {
	if a.knowsOwn(dial) {
		return true
	}
	if p := a.linked.Load(); p != nil {
		for _, l := range *p {
			if l.knowsOwn(dial) {
				return true
			}
		}
	}
	return false
}

func (a *Activity) knowsOwn(dial string) bool {
	if p := a.counts.Load(); p != nil {
		for _, c := range *p {
			if c.dial == dial {
				return true
			}
		}
	}
	return false
}

// Begin records a request whose InFlight counter is being learnt: until
// the matching Learn, on the Activity it returns, the instance counts as
// busy.
func (a *Activity) Begin() *Activity {
	r := a.root()
	r.pending.Add(1)
	return r
}

// Learn ends a Begin, recording count as the latest InFlight counter of
// dial (nil: not known after all). Older counters are kept while they
// have requests in flight.
func (a *Activity) Learn(dial string, count InFlight) {
	defer a.pending.Add(-1)
	if count == nil {
		return
	}
	for {
		old := a.counts.Load()
		list := []dialCount{{dial: dial, count: count}}
		dials := map[string]bool{dial: true}
		if old != nil {
			for i := len(*old) - 1; i >= 0; i-- { // latest first
				c := (*old)[i]
				switch {
				case c.count == count:
				case c.count.NumRequests() > 0:
					list = append(list, c) // its requests still run
				case !dials[c.dial] && len(dials) < maxDials:
					dials[c.dial] = true
					list = append(list, c)
				}
			}
		}
		slices.Reverse(list) // oldest first
		if a.counts.CompareAndSwap(old, &list) {
			return
		}
	}
}

// Forget drops the InFlight counters that have no request in flight (the
// instance was woken: its addresses may have changed).
func (a *Activity) Forget() {
	r := a.root()
	for {
		old := r.counts.Load()
		if old == nil {
			return
		}
		var list []dialCount
		for _, c := range *old {
			if c.count.NumRequests() > 0 {
				list = append(list, c)
			}
		}
		if r.counts.CompareAndSwap(old, &list) {
			return
		}
	}
}

// InFlight is the number of requests in flight to the instance, as far as
// known, through any catalog linked to the same shared Activity: a request
// whose counter is not learnt yet counts as one.
func (a *Activity) InFlight() int {
	r := a.root()
	n := r.own()
	if p := r.linked.Load(); p != nil {
		for _, l := range *p {
			n += l.own()
		}
	}
	return n
}

// Load is the number of requests in flight to the instance for deciding
// whether it is past its caddy.soft_limit (R5j): those its known counters
// count or, if more, those whose counter is still being learnt. A request
// being learnt is also in its counter once another request learnt it, and
// InFlight counts it twice until it ends: an instance just woken would
// look busier than it is, and its pool grow again. Load may count fewer
// than are in flight while the instance's address changes.
func (a *Activity) Load() int {
	r := a.root()
	pending, counted := r.ownParts()
	if p := r.linked.Load(); p != nil {
		for _, l := range *p {
			lp, lc := l.ownParts()
			pending, counted = pending+lp, counted+lc
		}
	}
	return max(pending, counted) + int(r.fleet.Load())
}

// SetFleetLoad sets the requests the other Caddys of a fleet have in
// flight to the instance (their leases' sum, R5j), which Load adds.
func (a *Activity) SetFleetLoad(n int) { a.root().fleet.Store(int32(min(n, 1<<30))) }

// own is a's own count, without the Activities linked to it.
func (a *Activity) own() int {
	pending, counted := a.ownParts()
	return pending + counted
}

// ownParts is a's own count of requests whose counter is being learnt,
// and that of its known counters.
func (a *Activity) ownParts() (pending, counted int) {
	pending = int(a.pending.Load())
	if p := a.counts.Load(); p != nil {
		for _, c := range *p {
			counted += c.count.NumRequests()
		}
	}
	return pending, counted
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

// Sleepers appends to dst every instance with a valid standby policy, and
// every one with a caddy.soft_limit (R5j), whose Policy.After may be 0:
// its requests are counted, and it is never put on standby.
func (c *Catalog) Sleepers(dst []Sleeper) []Sleeper {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byID {
		if e.activity == nil {
			continue
		}
		dst = append(dst, e.sleeper())
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
			if !e.wakeable() || e.maint || !e.servesHost(host, exact) { // R5i
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
	return e.wakeable() && (e.inst.State == StateStarting ||
		e.inst.State == StateRunning && (!e.isListening() || e.inst.Health == HealthStarting))
}

// sleeping reports an instance Caddy wakes (one with a standby policy) on
// standby: stopped or paused, or being put there by Caddy (woken once
// down).
func (e *entry) sleeping() bool {
	return e.wakeable() && (e.inst.State == StateStopped || e.inst.State == StatePaused ||
		e.inst.State == StateStopping && e.stopping)
}
