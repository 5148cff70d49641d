package follow

import "sync"

// Pending is the coalescing set of IDs an event stream leaves to fetch: a
// burst of events for one ID costs one fetch. Add and Flag may be called
// from one goroutine while another waits on Notify and Takes.
type Pending struct {
	mu      sync.Mutex
	ids     map[string]bool // ID -> deleted
	flagged bool
	groups  map[string]struct{}
	notify  chan struct{} // capacity 1: "there is work"
}

// NewPending returns an empty set.
func NewPending() *Pending {
	return &Pending{ids: make(map[string]bool), groups: make(map[string]struct{}), notify: make(chan struct{}, 1)}
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

// AddGroup records an event about a group of instances as a whole.
func (p *Pending) AddGroup(group string) {
	p.mu.Lock()
	p.groups[group] = struct{}{}
	p.mu.Unlock()
	p.signal()
}

// TakeGroups empties the set of groups and returns them.
func (p *Pending) TakeGroups() map[string]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	groups := p.groups
	p.groups = make(map[string]struct{}, len(groups))
	return groups
}

func (p *Pending) signal() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// Notify receives once there is something to Take or TakeGroups (one
// notification for any number of Adds, AddGroups and Flags).
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
