package standby

import (
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// PreWakeResult is what a pre-wake did (R5n, see Waker.PreWake).
type PreWakeResult uint8

const (
	// PreWakeNothing: the route has no instance on standby for the host.
	PreWakeNothing PreWakeResult = iota
	// PreWakeUnderWay: the instance a request would wake is being woken.
	PreWakeUnderWay
	// PreWakeStarted: a wake began.
	PreWakeStarted
	// PreWakeDeferred: a wake would start, but not now: the pre-wakes'
	// share of max_wakes is taken, or every candidate is backing off
	// from a failed wake. The request, if one follows, wakes as usual.
	PreWakeDeferred
)

// PreWake starts the wake that a request for host on route would start
// when none of its instances is routable (R5's order, R5i, R5k, backoff),
// and returns at once: it holds nothing and waits for nothing. It is how
// a TLS ClientHello naming host begins the wake before the handshake is
// done (R5n). It touches no instance's idle clock: a pre-wake is not
// use, and an instance woken by one that no request reaches goes back on
// standby once its standby_after has passed since it was ready.
// Pre-wakes take at most half of max_wakes (rounded up), so that the
// requests' own wakes always have slots a stream of ClientHellos cannot
// take.
func (w *Waker) PreWake(snap *catalog.Snapshot, route catalog.Route, host string, candidate func(catalog.WakeCandidate) bool) PreWakeResult {
	var buf [4]catalog.WakeCandidate
	cands := snap.WakeCandidates(buf[:0], route, host)
	if candidate != nil {
		cands = filterCandidates(cands, candidate)
	}
	if len(cands) == 0 {
		return PreWakeNothing
	}
	e := w.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.closed {
		return PreWakeNothing
	}
	for _, c := range cands {
		if e.wakes[c.ID] != nil {
			return PreWakeUnderWay
		}
	}
	if w.running >= preWakeSlots(w.maxWakes) {
		return PreWakeDeferred
	}
	now := w.now()
	for _, c := range cands {
		if f := e.failures[c.ID]; f != nil && now.Before(f.after) {
			continue
		}
		if c.State == catalog.StateStarting || c.State == catalog.StateRunning {
			return PreWakeUnderWay // on its way up already (R5.1)
		}
		w.startLocked(c, CauseHello, nil)
		return PreWakeStarted
	}
	return PreWakeDeferred
}

// preWakeSlots is how many of max wakes in progress leave room for a
// pre-wake: half, rounded up.
func preWakeSlots(max int) int { return (max + 1) / 2 }

// filterCandidates keeps, in place, the candidates keep accepts.
func filterCandidates(cands []catalog.WakeCandidate, keep func(catalog.WakeCandidate) bool) []catalog.WakeCandidate {
	out := cands[:0]
	for _, c := range cands {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}
