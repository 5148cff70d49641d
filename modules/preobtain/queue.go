package preobtain

import (
	"context"
	"sync"
)

// obtainPerClaimant bounds the names one instance has waiting in the
// obtainer's queue (R7b): a tenant with many names waits behind itself,
// never fills the queue for the others.
const obtainPerClaimant = 32

// fairQueue is the obtainer's queue of names (R7b): one FIFO per claiming
// instance, served in rotation, so that one instance's many (or slow, or
// failing) names delay another's new host by at most one obtain each.
// At most obtainQueueCap names in all, obtainPerClaimant per instance.
type fairQueue struct {
	mu     sync.Mutex
	by     map[string][]string // claimant -> its names, oldest first
	order  []string            // claimants with names, in rotation
	n      int
	signal chan struct{} // has a value while names wait
}

func newFairQueue() *fairQueue {
	return &fairQueue{by: make(map[string][]string), signal: make(chan struct{}, 1)}
}

// push queues host for claimant, and reports false when the queue or the
// claimant's share of it is full.
func (q *fairQueue) push(claimant, host string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	names := q.by[claimant]
	if q.n >= obtainQueueCap || len(names) >= obtainPerClaimant {
		return false
	}
	if len(names) == 0 {
		q.order = append(q.order, claimant)
	}
	q.by[claimant] = append(names, host)
	q.n++
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

// tryPop returns the next name in rotation, if any.
func (q *fairQueue) tryPop() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return "", false
	}
	claimant := q.order[0]
	names := q.by[claimant]
	host := names[0]
	q.order = q.order[1:]
	if len(names) == 1 {
		delete(q.by, claimant)
	} else {
		q.by[claimant] = names[1:]
		q.order = append(q.order, claimant) // its next name waits its turn
	}
	q.n--
	if q.n > 0 {
		select {
		case q.signal <- struct{}{}:
		default:
		}
	}
	return host, true
}

// pop waits for the next name in rotation, or for ctx to end.
func (q *fairQueue) pop(ctx context.Context) (string, bool) {
	for {
		if host, ok := q.tryPop(); ok {
			return host, true
		}
		select {
		case <-q.signal:
		case <-ctx.Done():
			return "", false
		}
	}
}

// len is how many names wait.
func (q *fairQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
