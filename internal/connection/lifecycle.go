package connection

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

// What happens to the connection's instances, as events for Caddy's
// events app (R13e, docs/events.md): the catalog's joins, leaves and
// removals, scale to zero's wakes and standbys, the heal's restarts, and
// the queue's overflows, through the connection's lifecycle.Bus, which
// never blocks them. The Caddy side plugs the events app in (SetEventSink)
// at every config load.

// eventsDropped counts the events dropped because the connection's buffer
// was full.
var eventsDropped = counter("events_dropped_total",
	"Lifecycle events (R13e) dropped because the buffer of events on their way to Caddy's events app was full "+
		"(1,024 per connection): the handlers are slower than the events come.", "kind", "daemon")

// newBus makes the connection's Bus; its identity of an instance known by
// ID alone comes from the catalog.
func (c *Conn) newBus() *lifecycle.Bus {
	dropped := eventsDropped.WithLabelValues(c.kind, c.address)
	return lifecycle.New(c.runCtx, lifecycle.Options{
		Kind: c.kind, Daemon: c.address, Dropped: dropped.Inc,
		Resolve: func(id string) (lifecycle.Instance, bool) {
			inst, hosts, ok := c.catalog.Identity(id)
			return identity(inst, hosts), ok
		},
	})
}

// identity is inst as lifecycle events name it.
func identity(inst catalog.Instance, hosts []string) lifecycle.Instance {
	return lifecycle.Instance{ID: inst.ID, Name: inst.Name, Hosts: hosts, Image: inst.Image}
}

// catalogChanged hands the catalog's change on to the Bus; the catalog's
// lock is held.
func (c *Conn) catalogChanged(change catalog.Change, inst catalog.Instance, hosts []string, why string) {
	name := lifecycle.Joined
	switch change {
	case catalog.Left:
		name = lifecycle.Left
	case catalog.Removed:
		name = lifecycle.Removed
	}
	if !c.events.Listens(name) {
		return
	}
	c.events.Emit(name, identity(inst, hosts), map[string]any{"why": why})
}

// SetEventSink makes s, Caddy's events app as the dicer app of the
// current config load wraps it, where the connection's lifecycle events
// go (nil: nowhere).
func (c *Conn) SetEventSink(s lifecycle.Sink) { c.events.SetSink(s) }

// Events is the connection's Bus, for what emits lifecycle events of its
// own (the queue: QueueOverflow).
func (c *Conn) Events() *lifecycle.Bus { return c.events }

// QueueOverflow emits lifecycle.QueueOverflow: a request for host on
// route found the route's queue full (queued of max). It never blocks.
// The client picks host and how many requests it sends, so the event's
// host is cut to a DNS name's 253 bytes, and a route emits at most one
// such event a second (the refusals are all counted in
// caddy_dicer_queue_overflow_total): a flood of refusals does not crowd
// the other instances' events out of the buffer.
func (c *Conn) QueueOverflow(route, host string, queued, max int) {
	if !c.events.Listens(lifecycle.QueueOverflow) || !c.overflows.allow(route, time.Now()) {
		return
	}
	if len(host) > maxEventHost {
		host = host[:maxEventHost]
	}
	c.events.Emit(lifecycle.QueueOverflow, lifecycle.Instance{}, map[string]any{
		"route": route, "host": host, "queued": queued, "max_queued": max})
}

// maxEventHost bounds a client's host in an event: a DNS name's length.
const maxEventHost = 253

// overflowLimit lets a route emit dicer_queue_overflow once a second. Its
// map holds a second per route name: the config's routes, a bounded set.
type overflowLimit struct {
	mu   sync.Mutex
	last map[string]int64 // route: unix second of its last event
}

// allow reports whether route may emit at now, and notes it if so.
func (l *overflowLimit) allow(route string, now time.Time) bool {
	sec := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[string]int64)
	}
	if last, ok := l.last[route]; ok && last == sec {
		return false
	}
	l.last[route] = sec
	return true
}

var _ prometheus.Collector = eventsDropped
