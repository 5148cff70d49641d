package dicertest

import (
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// filter is what a GetEventsRequest selects.
type filter struct {
	kind  dicerpb.EventKind
	id    string
	name  string
	since time.Time // zero: no lower bound
}

func (f filter) match(ev *dicerpb.Event) bool {
	if f.kind != dicerpb.EventKind_EVENT_KIND_UNSPECIFIED && ev.Kind != f.kind {
		return false
	}
	if f.id != "" && ev.Id != f.id {
		return false
	}
	if f.name != "" && ev.Name != f.name {
		return false
	}
	if !f.since.IsZero() && ev.GetTime().AsTime().Before(f.since) {
		return false
	}
	return true
}

// subscriber is one GetEvents follow stream. Stored events are never
// modified, so they are shared, not copied.
type subscriber struct {
	f   filter
	ch  chan *dicerpb.Event // FollowerBuffer deep
	cut chan struct{}       // closed when the daemon drops the subscriber
}

// recordLocked appends ev to the history and publishes it, unless events
// are switched off.
func (d *Daemon) recordLocked(ev *dicerpb.Event) {
	if d.quiet {
		return
	}
	d.appendLocked(ev)
}

func (d *Daemon) appendLocked(ev *dicerpb.Event) {
	d.history = append(d.history, ev)
	if len(d.history) > MaxHistory {
		d.history[0] = nil
		d.history = d.history[len(d.history)-MaxHistory:]
	}
	for s := range d.subs {
		if !s.f.match(ev) {
			continue
		}
		select {
		case s.ch <- ev:
		default: // FollowerBuffer behind
			d.cutLocked(s)
		}
	}
}

// subscribeLocked registers a follower. The caller reads the history under
// the same lock hold, so every event is in exactly one of the two.
func (d *Daemon) subscribeLocked(f filter) *subscriber {
	s := &subscriber{f: f, ch: make(chan *dicerpb.Event, FollowerBuffer), cut: make(chan struct{})}
	d.subs[s] = struct{}{}
	d.subsChangedLocked()
	return s
}

// unsubscribe removes s if the daemon has not already dropped it.
func (d *Daemon) unsubscribe(s *subscriber) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.subs[s]; ok {
		delete(d.subs, s)
		d.subsChangedLocked()
	}
}

func (d *Daemon) cutLocked(s *subscriber) {
	if _, ok := d.subs[s]; !ok {
		return
	}
	delete(d.subs, s)
	close(s.cut)
	d.subsChangedLocked()
}

func (d *Daemon) subsChangedLocked() {
	close(d.subsChanged)
	d.subsChanged = make(chan struct{})
}

// CutFollowers ends every open GetEvents follow stream with
// RESOURCE_EXHAUSTED, as the daemon does to a follower that fell behind.
func (d *Daemon) CutFollowers() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := range d.subs {
		d.cutLocked(s)
	}
}

// historyLocked returns the stored events that match f, oldest first, the
// last limit of them if limit > 0.
func (d *Daemon) historyLocked(f filter, limit int) []*dicerpb.Event {
	var out []*dicerpb.Event
	for _, ev := range d.history {
		if f.match(ev) {
			out = append(out, ev)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}
