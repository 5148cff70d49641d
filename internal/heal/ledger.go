package heal

import (
	"slices"
	"sync"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

const (
	// maxBackoff bounds the backoff between two restarts of one
	// container; healthyReset is how long it must stay healthy for its
	// backoff to start over.
	maxBackoff   = 10 * time.Minute
	healthyReset = maxBackoff
	// restartWatch bounds how long a restart counts as in progress (for
	// its group, R1e) once the call returned, when the catalog does not
	// show its container's next verdict.
	restartWatch = 2 * time.Minute
	// maxRestarting is how many restarts one Engine may have in progress
	// at once, whatever their groups.
	maxRestarting = 4
	// waitTTL is how long a container due for a restart keeps its place
	// in its group's line once its healer stopped asking (it is looked
	// at again every busyRecheck while it waits).
	waitTTL = 5 * busyRecheck
	// noHost is the group of the containers without caddy.host (routed
	// by a selector): one of them is restarted at a time.
	noHost = "\x00"
)

// Ledger is the healing state of one Docker Engine, shared by every
// connection to it (as the scale-to-zero state is, R5f), so that two
// connections never restart one container twice: each container's
// restarts in the last hour, its backoff, and the restarts in progress.
type Ledger struct {
	mu         sync.Mutex
	records    map[string]*record // by container ID, once restarted
	restarting int                // calls in progress
}

// NewLedger is an Engine's empty ledger.
func NewLedger() *Ledger { return &Ledger{records: map[string]*record{}} }

// record is one container's restarts.
type record struct {
	// restarts are the times of its restarts in the last hour, oldest
	// first; series counts those since it was last healthy for
	// healthyReset (the backoff's exponent).
	restarts []time.Time
	series   int
	// healthySince is when it last became healthy; zero while it is not.
	healthySince time.Time
	// capWarned: the cap's warning was logged since its last restart.
	capWarned bool
	flight    *flight
	// wait is its place in its group's line while it is due and another
	// restart holds it back (R1e: the least recently restarted first,
	// then the oldest due).
	wait *wait
}

// wait is a due restart held back by its group (or by maxRestarting).
type wait struct {
	hosts []string
	due   time.Time // when it fell due: its label's time, or its backoff
	seen  time.Time // when its healer last asked
}

// last is when r's container was last restarted within the hour before
// now; zero if it was not.
func (r *record) last(now time.Time) time.Time {
	if len(r.restarts) == 0 || now.Sub(r.restarts[len(r.restarts)-1]) >= time.Hour {
		return time.Time{}
	}
	return r.restarts[len(r.restarts)-1]
}

// first reports whether the restart of a (last restarted at aLast, due
// at aDue) comes before that of b in their group's line: the one
// restarted least recently (never, or not within the hour, before any
// other), then the oldest due, then by ID. So a container restarted
// once waits for every other due in its group before its next turn, and
// no number of another tenant's unhealthy containers keeps one that was
// not restarted back beyond the restart in progress.
func first(aLast, aDue time.Time, aID string, bLast, bDue time.Time, bID string) bool {
	switch {
	case !aLast.Equal(bLast):
		return aLast.Before(bLast)
	case !aDue.Equal(bDue):
		return aDue.Before(bDue)
	}
	return aID < bID
}

// flight is a restart in progress: from the call until the catalog shows
// the container's next verdict (or restartWatch after the call returned).
type flight struct {
	hosts    []string
	returned time.Time // zero while the call runs
	// reset: the catalog showed the container not unhealthy since the
	// call was made (starting, stopped, ...), so an unhealthy now is a
	// new verdict. The Engine's events of a restart, and the catalog's
	// view of them, may come before the call's answer (a loaded
	// Engine): they count from the call, not from its answer.
	reset bool
	// verdict: the next verdict came while the call ran (unhealthy
	// again after reset): the restart ends when the call returns.
	verdict bool
}

// over reports whether f no longer counts as in progress at now.
func (f *flight) over(now time.Time) bool {
	return !f.returned.IsZero() && now.Sub(f.returned) >= restartWatch
}

// verdict is what claim decided.
type verdict uint8

const (
	claimed verdict = iota // restart it now
	waiting                // its backoff runs until at
	capped                 // its cap is reached until at
	busy                   // it, or one of its group, is being restarted
)

// claim is the ledger's answer to a container due for a restart.
type claim struct {
	verdict verdict
	at      time.Time // waiting, capped: when to look again
	warn    bool      // capped: log it (once per reach of the cap)
	// attempt is the restart's number in its series, next the backoff
	// before the one after it (claimed).
	attempt  int
	next     time.Duration
	lastHour int
}

// claim decides whether the container id, of hosts (its group, R1e),
// due for a restart since due with backoff base, is restarted now; if so
// it is in progress until done and the catalog's next verdict (observe).
// Held back by its group, it takes its place in the group's line.
func (l *Ledger) claim(id string, hosts []string, base time.Duration, perHour int, due, now time.Time) claim {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[id]
	if r == nil {
		r = &record{}
		l.records[id] = r
	}
	if r.flight != nil && !r.flight.over(now) {
		return claim{verdict: busy}
	}
	r.flight = nil
	r.restarts = dropOlder(r.restarts, now.Add(-time.Hour))
	if r.series > 0 && len(r.restarts) > 0 {
		at := r.last(now).Add(backoff(base, r.series))
		if now.Before(at) {
			r.wait = nil
			return claim{verdict: waiting, at: at}
		}
		due = laterOf(due, at)
	}
	if len(r.restarts) >= perHour {
		r.wait = nil
		warn := !r.capWarned
		r.capWarned = true
		return claim{verdict: capped, at: r.restarts[len(r.restarts)-perHour].Add(time.Hour), warn: warn, lastHour: len(r.restarts)}
	}
	group := setOf(hosts)
	if l.restarting >= maxRestarting || l.groupBusy(id, group, now) || l.behind(id, r.last(now), group, due, now) {
		if r.wait == nil {
			r.wait = &wait{}
		}
		r.wait.hosts, r.wait.due, r.wait.seen = hosts, due, now
		return claim{verdict: busy}
	}
	r.wait = nil
	l.restarting++
	r.flight = &flight{hosts: hosts}
	r.restarts = append(r.restarts, now)
	r.series++
	r.capWarned = false
	return claim{verdict: claimed, attempt: r.series, next: backoff(base, r.series), lastHour: len(r.restarts)}
}

// groupBusy reports whether another container sharing a host with group
// is being restarted (R1e).
func (l *Ledger) groupBusy(id string, group map[string]struct{}, now time.Time) bool {
	for other, r := range l.records {
		if other != id && r.flight != nil && !r.flight.over(now) && shareHost(r.flight.hosts, group) {
			return true
		}
	}
	return false
}

// behind reports whether another container sharing a host with group
// waits for its restart and comes first (R1e).
func (l *Ledger) behind(id string, last time.Time, group map[string]struct{}, due, now time.Time) bool {
	for other, r := range l.records {
		w := r.wait
		if other == id || w == nil || now.Sub(w.seen) >= waitTTL || !shareHost(w.hosts, group) {
			continue
		}
		if first(r.last(now), w.due, other, last, due, id) {
			return true
		}
	}
	return false
}

// lastRestart is when the container id was last restarted within the
// hour (zero: not), for its healer to look at its due containers in
// their line's order.
func (l *Ledger) lastRestart(id string, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.records[id]; r != nil {
		return r.last(now)
	}
	return time.Time{}
}

// setOf is a group's hosts as a set: a claim costs the records times
// their hosts (at most catalog.MaxHostNames each), not times its own too.
func setOf(hosts []string) map[string]struct{} {
	set := make(map[string]struct{}, len(hosts))
	for _, h := range hosts {
		set[h] = struct{}{}
	}
	return set
}

// shareHost reports whether hosts holds a host of group.
func shareHost(hosts []string, group map[string]struct{}) bool {
	for _, h := range hosts {
		if _, ok := group[h]; ok {
			return true
		}
	}
	return false
}

// done ends the call of a claimed restart at now; a failed call ends the
// restart (nothing to wait for).
func (l *Ledger) done(id string, failed bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.restarting--
	r := l.records[id]
	if r == nil || r.flight == nil {
		return
	}
	if failed || r.flight.verdict {
		r.flight = nil
		return
	}
	r.flight.returned = now
}

// observe takes the catalog's view of a container: its restart ends at
// its next verdict, and its backoff starts over once it was healthy for
// healthyReset.
func (l *Ledger) observe(inst catalog.Instance, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[inst.ID]
	if r == nil {
		return
	}
	healthy := inst.State == catalog.StateRunning && inst.Health == catalog.HealthHealthy
	unhealthy := inst.State == catalog.StateRunning && inst.Health == catalog.HealthUnhealthy
	if !unhealthy {
		r.wait = nil // no longer due
	}
	switch {
	case healthy && r.healthySince.IsZero():
		r.healthySince = now
	case !healthy && !r.healthySince.IsZero():
		if now.Sub(r.healthySince) >= healthyReset {
			r.series = 0
		}
		r.healthySince = time.Time{}
	}
	if f := r.flight; f != nil {
		running := f.returned.IsZero() // the call has not returned yet
		switch {
		case running && f.reset && (healthy || unhealthy):
			f.verdict = true // its next verdict, before the call's answer
		case running:
			if !unhealthy {
				f.reset = true
			}
		case healthy, f.reset && unhealthy:
			r.flight = nil // its next verdict
		case !unhealthy:
			f.reset = true // starting (or stopped: if it died, restartWatch ends it)
		}
	}
}

// gone forgets a container the Engine removed.
func (l *Ledger) gone(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.records[id]; r != nil && r.flight == nil {
		delete(l.records, id)
	}
}

// backoff is the least time between the n-th restart of a series and the
// next: base doubled n times, at most maxBackoff.
func backoff(base time.Duration, n int) time.Duration {
	d := base
	for range n {
		if d >= maxBackoff {
			break
		}
		d *= 2
	}
	return min(d, maxBackoff)
}

// dropOlder drops the times up to since from ts (oldest first).
func dropOlder(ts []time.Time, since time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(since) {
		i++
	}
	return slices.Delete(ts, 0, i)
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// groupOf is the group of a container (R1e): the hosts the catalog
// routes it for (catalog.RoutedHosts: its caddy.host after R2, R2a and
// R2c, at most catalog.MaxHostNames, not the label as written), or
// noHost when it has no caddy.host; none (a group of its own) when the
// label routes it for nothing.
func groupOf(labels map[string]string) []string {
	hosts, listed := catalog.RoutedHosts(labels)
	if !listed {
		return []string{noHost}
	}
	return hosts
}
