// Package budget keeps the issuance budgets of on-demand TLS (R7d): how
// many certificate orders one registered domain and one claiming instance
// may start per hour, decided in memory before any call to a CA, so that
// one tenant's names cannot spend the ACME account's rate limits that
// every tenant shares.
//
// A Ledger charges a name once per window: asking again for a name
// already charged (the handshakes of one order, a retry) costs nothing
// more, and is answered without a lock or a clock read: an immutable set,
// replaced when a name is charged or forgotten. A name leaves the window
// at the sweep, once a minute, so a window is an hour to the minute. Its
// memory is bounded: at most MaxNames names, domains and
// instances each are remembered; past that, a name is refused rather than
// remembered (the budget it is refused by is "names").
package budget

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/publicsuffix"
)

const (
	// Window is the span every budget counts over.
	Window = time.Hour
	// MaxNames bounds each of the ledger's maps.
	MaxNames = 10_000
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
	// free holds the names charged within the Window, for Charged: read
	// without the lock, replaced (never changed) under it.
	free atomic.Pointer[map[string]struct{}]

	mu        sync.Mutex
	names     map[string]time.Time   // name -> when charged
	domains   map[string][]time.Time // registered domain -> charges, oldest first
	instances map[string][]time.Time // claiming instance -> charges, oldest first
	refused   map[string]time.Time   // budget and key -> first refusal in the window
	pruned    time.Time
	// sweep is armed while names are remembered: it forgets those out of
	// the Window each minute. closed: Close was called.
	sweep  *time.Timer
	closed bool
}

// sweepEvery is how often an armed ledger forgets what left the Window.
const sweepEvery = time.Minute

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{names: map[string]time.Time{}, domains: map[string][]time.Time{}, instances: map[string][]time.Time{}, refused: map[string]time.Time{}}
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
	free := l.free.Load()
	if free == nil {
		return false
	}
	_, ok := (*free)[name]
	return ok
}

// publishFree replaces the set Charged reads with the names remembered
// now. l.mu is held. A copy per change: names are charged a few times an
// hour per tenant, at most MaxNames an hour in all.
func (l *Ledger) publishFree() {
	free := make(map[string]struct{}, len(l.names))
	for n := range l.names {
		free[n] = struct{}{}
	}
	l.free.Store(&free)
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
// names are remembered.
func (l *Ledger) swept() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(time.Now())
	l.sweep = nil
	l.armLocked()
}

// armLocked arms the sweep if names are remembered and none is armed.
func (l *Ledger) armLocked() {
	if l.sweep == nil && !l.closed && len(l.names) > 0 {
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
// refuses it. A name charged within the Window is allowed again at no
// cost.
func (l *Ledger) Charge(name, instance string, lim Limits, now time.Time) Refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.names[name]; ok && now.Sub(at) < Window {
		return Refusal{}
	}
	if now.Sub(l.pruned) >= time.Minute || len(l.names) >= MaxNames {
		l.prune(now)
	}
	domain := RegisteredDomain(name)
	ds := live(l.domains[domain], now)
	is := live(l.instances[instance], now)
	switch {
	case lim.PerDomain > 0 && len(ds) >= lim.PerDomain:
		return l.refuse(Domain, domain, now)
	case lim.PerInstance > 0 && len(is) >= lim.PerInstance:
		return l.refuse(Instance, instance, now)
	case len(l.names) >= MaxNames || len(ds) == 0 && len(l.domains) >= MaxNames ||
		len(is) == 0 && len(l.instances) >= MaxNames:
		return l.refuse(Names, "", now)
	}
	l.names[name] = now
	l.publishFree()
	l.domains[domain] = append(ds, now)
	l.instances[instance] = append(is, now)
	l.armLocked()
	return Refusal{}
}

// refuse is the Refusal by budget of key, First if none was this Window.
func (l *Ledger) refuse(budget, key string, now time.Time) Refusal {
	r := Refusal{Budget: budget, Key: key}
	k := budget + "\x00" + key
	if at, ok := l.refused[k]; !ok || now.Sub(at) >= Window {
		if len(l.refused) < MaxNames {
			l.refused[k] = now
		}
		r.First = true
	}
	return r
}

// live drops the charges of ts older than the Window before now.
func live(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= Window {
		i++
	}
	return ts[i:]
}

// prune forgets everything older than the Window.
func (l *Ledger) prune(now time.Time) {
	l.pruned = now
	forgot := false
	for n, at := range l.names {
		if now.Sub(at) >= Window {
			delete(l.names, n)
			forgot = true
		}
	}
	if forgot {
		l.publishFree()
	}
	for k, at := range l.refused {
		if now.Sub(at) >= Window {
			delete(l.refused, k)
		}
	}
	for _, m := range []map[string][]time.Time{l.domains, l.instances} {
		for k, ts := range m {
			if ts = live(ts, now); len(ts) == 0 {
				delete(m, k)
			} else {
				m[k] = ts
			}
		}
	}
}
