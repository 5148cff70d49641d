package connection

import (
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
func (c *Conn) QueueOverflow(route, host string, queued, max int) {
	if !c.events.Listens(lifecycle.QueueOverflow) {
		return
	}
	c.events.Emit(lifecycle.QueueOverflow, lifecycle.Instance{}, map[string]any{
		"route": route, "host": host, "queued": queued, "max_queued": max})
}

var _ prometheus.Collector = eventsDropped
