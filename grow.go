package caddydicer

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// Pools that grow under load (R5j), whatever the daemon: the request
// path's share of it. On Docker the connection's standby.Waker starts the
// next instance; on Dicer, which wakes an instance on standby when a
// connection reaches its published port, the connection's
// connectwake.Grower makes that connection; on Swarm the connection's
// swarm.Scaler adds a replica to the service. Either learns the requests in
// flight from reverse_proxy's own counters (record, countInFlight).

// newGrower returns the Grower of a connection to a daemon that wakes on
// connect, counting each growth as a wake started for load.
func newGrower(ctx context.Context, c *connection, spec connSpec) *connectwake.Grower {
	started := c.metrics.wakesStarted(standby.CauseLoad)
	return connectwake.New(ctx, connectwake.Options{Logger: spec.opts.Logger, Started: started.Inc})
}

// grow wakes the next instance on standby of route for host when every
// one of targets, its routable instances, is past its caddy.soft_limit
// (R5j): atomics only unless they all are.
func (c *connection) grow(snap *catalog.Snapshot, route catalog.Route, host string, targets []catalog.Target) {
	switch {
	case c.standby != nil:
		c.standby.Grow(snap, route, host, targets)
	case c.grower != nil:
		c.grower.Grow(snap, route, host, targets)
	case c.scaler != nil:
		c.scaler.Grow(targets)
	}
}

// recordUse notes a request routed to u, an instance with an Activity
// (labelled caddy.standby_after or caddy.soft_limit), for scale to zero
// (Docker) and for the in-flight counts of R5j.
func (c *connection) recordUse(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	switch {
	case c.standby != nil:
		record(c.standby, r, a, u)
	case c.grower != nil, c.scaler != nil:
		countInFlight(r, a, u)
	}
}

// countInFlight learns, for the first request to a dial address and one
// request per catalog.RelearnEvery, reverse_proxy's in-flight counter for
// it (see learnInFlight): a daemon that puts instances on standby itself
// needs no record of their last request. Atomics only on the request
// path, no lock.
func countInFlight(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	if a.Learning(u.Dial, time.Now()) {
		learnInFlight(r, a, u)
	}
}

// waking reports whether the connection is waking the instance id, for
// whatever cause: its readiness probe takes the fast path (wakeprobe.go).
func (c *connection) waking(id string) bool {
	switch {
	case c.standby != nil:
		return c.standby.Waking(id)
	case c.grower != nil:
		return c.grower.Waking(id)
	}
	return false
}
