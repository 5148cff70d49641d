package follow

import (
	"sync"
	"time"
)

// Pending is the coalescing set of IDs an event stream leaves to fetch: a
// burst of events for one ID costs one fetch. Add and Flag may be called
// from one goroutine while another waits on Notify and Takes.
type Pending struct {
	mu        sync.Mutex
	ids       map[string]PendingEvent
	flagged   bool
	flaggedAt time.Time
	groups    map[string]struct{}
	notify    chan struct{} // capacity 1: "there is work"
}

// PendingEvent is what the events about one ID since the last Take said.
type PendingEvent struct {
	// Deleted is set once an event said the instance is gone.
	Deleted bool
	// Received is when the first of them arrived.
	Received time.Time
	// Stopping is set when the last of them that said so said the
	// instance is stopping (Event.Stopping), not that it started.
	Stopping bool
	// Started is set when the last of them that said either said the
	// instance started (Event.Started).
	Started bool
}

// NewPending returns an empty set.
func NewPending() *Pending {
	return &Pending{ids: make(map[string]PendingEvent), groups: make(map[string]struct{}), notify: make(chan struct{}, 1)}
}

// Add records an event for id. deleted sticks until the next Take: a
// daemon never reuses an ID, and a later event (a network disconnect after
// a destroy, say) does not bring it back.
func (p *Pending) Add(id string, deleted bool) {
	p.AddEvent(Event{ID: id, Deleted: deleted})
}

// AddEvent is Add for an event about e.ID, which also records whether it
// said the instance is stopping or started.
func (p *Pending) AddEvent(e Event) {
	now := time.Now()
	p.mu.Lock()
	ev, ok := p.ids[e.ID]
	if !ok {
		ev.Received = now
	}
	ev.Deleted = ev.Deleted || e.Deleted
	switch {
	case e.Stopping:
		ev.Stopping, ev.Started = true, false
	case e.Started:
		ev.Stopping, ev.Started = false, true
	}
	p.ids[e.ID] = ev
	p.mu.Unlock()
	p.signal()
}

// Flag records an event that is about no one ID (the daemon's networks
// changed, say).
func (p *Pending) Flag() {
	now := time.Now()
	p.mu.Lock()
	if !p.flagged {
		p.flagged, p.flaggedAt = true, now
	}
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

// Take empties the set: the IDs, each with what its events said, and
// whether Flag was called, and when first.
func (p *Pending) Take() (ids map[string]PendingEvent, flagged bool, flaggedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids, flagged, flaggedAt = p.ids, p.flagged, p.flaggedAt
	p.ids, p.flagged = make(map[string]PendingEvent, len(ids)), false
	return ids, flagged, flaggedAt
}
