package follow

import "sync"

// Pending is the coalescing set of IDs an event stream leaves to fetch: a
// burst of events for one ID costs one fetch. Add and Flag may be called
// from one goroutine while another waits on Notify and Takes.
type Pending struct {
	mu      sync.Mutex
	ids     map[string]bool // ID -> deleted
	flagged bool
	notify  chan struct{} // capacity 1: "there is work"
}

// NewPending returns an empty set.
func NewPending() *Pending {
	return &Pending{ids: make(map[string]bool), notify: make(chan struct{}, 1)}
}

// Add records an event for id. deleted sticks until the next Take: a
// daemon never reuses an ID, and a later event (a network disconnect after
// a destroy, say) does not bring it back.
func (p *Pending) Add(id string, deleted bool) {
	p.mu.Lock()
	p.ids[id] = p.ids[id] || deleted
	p.mu.Unlock()
	p.signal()
}

// Flag records an event that is about no one ID (the daemon's networks
// changed, say).
func (p *Pending) Flag() {
	p.mu.Lock()
	p.flagged = true
	p.mu.Unlock()
	p.signal()
}

func (p *Pending) signal() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// Notify receives once there is something to Take (one notification for
// any number of Adds and Flags).
func (p *Pending) Notify() <-chan struct{} { return p.notify }

// Take empties the set: the IDs, each with whether it was deleted, and
// whether Flag was called.
func (p *Pending) Take() (ids map[string]bool, flagged bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids, flagged = p.ids, p.flagged
	p.ids, p.flagged = make(map[string]bool, len(ids)), false
	return ids, flagged
}
