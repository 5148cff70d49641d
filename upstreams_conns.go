package caddydicer

import (
	"context"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// The upstream sources also route whole connections, for a proxy of
// another Caddy app (the layer-4 handler in ./modules/l4dicer, R14): the same
// settings, catalog, readiness, rotation and scale to zero as for HTTP
// requests, answered per connection instead of per request.

// ConnTargets returns where a connection for host may go (host: the TLS
// server name a layer-4 route matched, or "" when it has none), as
// GetUpstreams does for a request: the routable instances, in rotation
// order. With none, an instance to wake is woken (R5, Docker) and the
// call waits until it is ready, ctx ends or the wake timeout passes; then
// nothing is returned and the connection should be closed. On Dicer the
// instance on standby is returned, and Dicer wakes it at the connection.
func (s *upstreamSource) ConnTargets(ctx context.Context, host string) []connection.Target {
	var buf [8]catalog.Target
	host = catalog.NormalizeHost(host)
	targets, pick := s.conn.Catalog().Snapshot().Pick(buf[:0], s.route, host, false)
	if len(targets) == 0 {
		targets = s.holdConn(ctx, host, buf[:0])
	}
	if pick == catalog.PickedStandby && s.wakes != nil {
		s.wakes.Inc()
	}
	if len(targets) == 0 && s.noUpstream != nil {
		s.noUpstream.Inc()
	}
	out := make([]connection.Target, len(targets))
	for i, t := range targets {
		out[i] = connection.TargetOf(t)
	}
	return out
}

// holdConn is ConnTargets for a route with nothing routable: it wakes an
// instance on a daemon that Caddy wakes (Docker) and waits for it, at most
// the wake timeout.
func (s *upstreamSource) holdConn(ctx context.Context, host string, buf []catalog.Target) []catalog.Target {
	if !s.conn.WakesOnRequest() {
		return nil
	}
	timeout := s.wakeTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	targets, _ := s.conn.Hold(ctx, s.route, host, timeout, buf)
	return targets
}

// Opened records a connection open to t, which keeps t's instance from
// going on standby while it lasts (an open connection is activity, however
// long it stays quiet: R5, R14b); call the returned func once it closes.
func (s *upstreamSource) Opened(t connection.Target) (closed func()) {
	return s.conn.Opened(t)
}
