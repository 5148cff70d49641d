// Package budget keeps the issuance budgets of on-demand TLS (R7d): how
// many certificate orders one registered domain and one claiming instance
// may start per hour, decided in memory before any call to a CA, so that
// one tenant's names cannot spend the ACME account's rate limits that
// every tenant shares.
//
// A Ledger charges a name once per window: asking again for a name
// already charged (the handshakes of one order, a retry) costs nothing
// more, and is answered without a lock or a clock read. Every charge and
// every refusal costs constant work (amortised): charges leave the window
// in the order they were made, from the head of a queue, when the ledger
// is next used or at the sweep, once a minute, so a window is an hour to
// the minute. Its memory is bounded: at most MaxNames names are
// remembered (and so as many domains and instances); past that, a name
// is refused rather than remembered (the budget it is refused by is
// "names").
package budget

import (
	"sync"
	"time"

	"golang.org/x/net/publicsuffix"
)

const (
	// Window is the span every budget counts over.
	Window = time.Hour
	// MaxNames bounds the names the ledger remembers, and each of its
	// other memories.
	MaxNames = 10_000
	// RefusalMemory is how long a refused name is remembered as having
	// no certificate in storage (see Refused): a certificate another
	// Caddy stores for it meanwhile is loaded at most this much later.
	RefusalMemory = time.Minute
)

// The budgets a name can be refused by, as the metric labels them.
const (
	Domain   = "domain"
	Instance = "instance"
	Names    = "names"
)

// Limits are the orders allowed per Window; 0 is no limit.
type Limits struct {
	PerDomain, PerInstance int
}

// Ledger records the orders charged over the last Window. It is safe for
// concurrent use.
type Ledger struct {
	// free holds the names charged within the Window (to the minute),
	// for Charged: read without the lock, written under it.
	free sync.Map // name -> struct{}

	mu        sync.Mutex
	names     map[string]time.Time // name -> when charged
	domains   map[string]int       // registered domain -> charges in the Window
	instances map[string]int       // claiming instance -> charges in the Window
	charges   queue[charge]        // the charges in the Window, oldest first
	// refused is, by budget and key, the first refusal in the Window;
	// refusals the same in order.
	refused  map[refusalKey]time.Time
	refusals queue[refusalAt]
	// unstored are the names refused within RefusalMemory (see Refused),
	// by when; unstoredAt the same in order.
	unstored   map[string]time.Time
	unstoredAt queue[nameAt]
	// latest is the latest time the ledger was told: times are taken no
	// earlier, so that each queue is in time order.
	latest time.Time
	// sweep is armed while anything is remembered: it forgets what left
	// the Window each minute. closed: Close was called.
	sweep  *time.Timer
	closed bool
}

// charge is one name charged.
type charge struct {
	name, domain, instance string
	at                     time.Time
}

// refusalKey is a budget and the key (domain, instance) it refused.
type refusalKey struct{ budget, key string }

type refusalAt struct {
	key refusalKey
	at  time.Time
}

type nameAt struct {
	name string
	at   time.Time
}

// sweepEvery is how often an armed ledger forgets what left the Window.
const sweepEvery = time.Minute

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{
		names: map[string]time.Time{}, domains: map[string]int{}, instances: map[string]int{},
		refused: map[refusalKey]time.Time{}, unstored: map[string]time.Time{},
	}
}

// RegisteredDomain is the domain a CA counts name under: its public
// suffix plus one label (shop.example.co.uk: example.co.uk); the name
// itself when it has none (a single label, or a suffix).
func RegisteredDomain(name string) string {
	d, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		return name
	}
	return d
}

// Charged reports whether name was charged within the Window (to the
// minute): the next Charge of it is free. It takes no lock and reads no
// clock.
func (l *Ledger) Charged(name string) bool {
	_, ok := l.free.Load(name)
	return ok
}

// Refused reports whether name was refused within RefusalMemory before
// now. A caller that looks in storage before charging a name (a
// certificate stored is no order) looked then and found none, and need
// not look again: a refused name repeated (a client's retries, a
// scanner) costs no storage call.
func (l *Ledger) Refused(name string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.at(now)
	l.expire(now)
	_, ok := l.unstored[name]
	return ok
}

// Close stops the sweep.
func (l *Ledger) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.sweep != nil {
		l.sweep.Stop()
	}
}

// swept forgets what left the Window, and arms the next sweep while
// anything is remembered.
func (l *Ledger) swept() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.at(time.Now()))
	l.sweep = nil
	l.armLocked()
}

// armLocked arms the sweep if anything is remembered and none is armed.
func (l *Ledger) armLocked() {
	if l.sweep == nil && !l.closed && (len(l.names) > 0 || len(l.refused) > 0 || len(l.unstored) > 0) {
		l.sweep = time.AfterFunc(sweepEvery, l.swept)
	}
}

// Refusal is why Charge refused a name.
type Refusal struct {
	// Budget is Domain, Instance or Names; "" when the name is allowed.
	Budget string
	// Key is the registered domain or the instance whose budget is spent.
	Key string
	// First: the first refusal by this budget of this key in the
	// Window, to log once.
	First bool
}

// Charge charges an order of name, claimed by instance, against lim at
// now, and returns a zero Refusal if it is allowed, else the budget that
// refuses it (and name is Refused for RefusalMemory). A name charged
// within the Window is allowed again at no cost.
func (l *Ledger) Charge(name, instance string, lim Limits, now time.Time) Refusal {
	return l.ChargeAny(name, []string{instance}, lim, now)
}

// ChargeAny is Charge of a name several instances claim: it is charged
// to the first of instances whose budget has room, and refused by the
// instance budget only when none has (Key: the first), so that an
// instance listing another's name cannot spend the budget that name is
// charged to. No instances: charged to the instance "".
func (l *Ledger) ChargeAny(name string, instances []string, lim Limits, now time.Time) Refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.at(now)
	l.expire(now)
	if _, ok := l.names[name]; ok {
		return Refusal{}
	}
	if len(instances) == 0 {
		instances = []string{""}
	}
	instance, room := instances[0], lim.PerInstance == 0
	for _, in := range instances {
		if room {
			break
		}
		if l.instances[in] < lim.PerInstance {
			instance, room = in, true
		}
	}
	domain := RegisteredDomain(name)
	switch {
	case lim.PerDomain > 0 && l.domains[domain] >= lim.PerDomain:
		return l.refuse(name, Domain, domain, now)
	case !room:
		return l.refuse(name, Instance, instance, now)
	case len(l.names) >= MaxNames:
		return l.refuse(name, Names, "", now)
	}
	l.names[name] = now
	l.free.Store(name, struct{}{})
	l.domains[domain]++
	l.instances[instance]++
	l.charges.push(charge{name: name, domain: domain, instance: instance, at: now})
	l.armLocked()
	return Refusal{}
}

// at is now, or the latest time the ledger was told if that is later
// (two callers' clocks read in one order, taken in the other). l.mu is
// held.
func (l *Ledger) at(now time.Time) time.Time {
	if now.Before(l.latest) {
		return l.latest
	}
	l.latest = now
	return now
}

// refuse is the Refusal of name by budget of key, First if none was this
// Window; name is remembered as Refused. l.mu is held.
func (l *Ledger) refuse(name, budget, key string, now time.Time) Refusal {
	if _, ok := l.unstored[name]; !ok && len(l.unstored) < MaxNames {
		l.unstored[name] = now
		l.unstoredAt.push(nameAt{name, now})
	}
	r := Refusal{Budget: budget, Key: key}
	k := refusalKey{budget, key}
	if _, ok := l.refused[k]; !ok {
		if len(l.refused) < MaxNames {
			l.refused[k] = now
			l.refusals.push(refusalAt{k, now})
		}
		r.First = true
	}
	l.armLocked()
	return r
}

// expire forgets what left the Window (or RefusalMemory) by now, oldest
// first: constant work per entry over its life. l.mu is held.
func (l *Ledger) expire(now time.Time) {
	for c, ok := l.charges.peek(); ok && now.Sub(c.at) >= Window; c, ok = l.charges.peek() {
		l.charges.pop()
		delete(l.names, c.name)
		l.free.Delete(c.name)
		decrement(l.domains, c.domain)
		decrement(l.instances, c.instance)
	}
	for r, ok := l.refusals.peek(); ok && now.Sub(r.at) >= Window; r, ok = l.refusals.peek() {
		l.refusals.pop()
		delete(l.refused, r.key)
	}
	for n, ok := l.unstoredAt.peek(); ok && now.Sub(n.at) >= RefusalMemory; n, ok = l.unstoredAt.peek() {
		l.unstoredAt.pop()
		delete(l.unstored, n.name)
	}
}

// decrement takes one from m[k], forgetting k at zero.
func decrement(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// queue is a first-in first-out queue: push and pop cost constant
// amortised work (the slice is compacted once half of it is popped).
type queue[T any] struct {
	items []T
	head  int
}

func (q *queue[T]) push(v T) { q.items = append(q.items, v) }

func (q *queue[T]) peek() (T, bool) {
	if q.head == len(q.items) {
		var zero T
		return zero, false
	}
	return q.items[q.head], true
}

func (q *queue[T]) pop() {
	var zero T
	q.items[q.head] = zero
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 64 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}
