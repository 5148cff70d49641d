package caddydicer

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// Keep-alive across a freeze (R5a): Caddy's HTTP transport keeps idle
// connections to an upstream and reuses them. A daemon freezes an instance
// it puts on standby (Dicer) or pauses (Docker); a connection open then
// stays open on Caddy's side with nothing answering it, and Dicer wakes an
// instance only on a new connection to its published port. So when the
// catalog sees an instance freeze it tells the connection (Options.Froze),
// which closes the idle connections of the transport of every
// reverse_proxy handler with a route on that daemon, before the catalog
// publishes the freeze: the next request to the instance, the one that
// wakes it, opens a new connection, at the instance's real address.
//
// A connection busy at the freeze is not idle and stays open. It comes
// back to the pool when its response is through, which a frozen guest
// does not send before it is woken, and the connection then works again.
// The exception is a response the guest finished just before it froze and
// Caddy had not read yet: that connection comes back while the guest is
// frozen. So a request that is sent to an instance on standby to wake it
// (R5.2) closes its handler's idle connections again before it dials; the
// route then has nothing routable, so no other instance of it loses a
// connection.

// keepAlive is what an upstream source knows of the transport its
// requests go through: the reverse_proxy handler that holds the source,
// found at provision, and that handler's way of closing idle
// connections, read at the first request (the handler sets its Transport
// after provisioning its upstreams, and a request comes after the whole
// handler is provisioned).
type keepAlive struct {
	handler *reverseproxy.Handler // nil when no handler holds the source (unit tests)
	once    sync.Once
	closer  atomic.Pointer[func()]
}

// handlerOf returns the reverse_proxy handler that loads, directly or
// through a `dynamic multi`, the module ctx provisions: the nearest
// *reverseproxy.Handler among the modules that load it (ctx.Modules ends
// with the module itself).
func handlerOf(ctx caddy.Context) *reverseproxy.Handler {
	mods := ctx.Modules()
	for i := len(mods) - 2; i >= 0; i-- {
		if h, ok := mods[i].(*reverseproxy.Handler); ok {
			return h
		}
	}
	return nil
}

// resolve reads the handler's transport once, at the first request; later
// calls cost one atomic load. A nil k (a source not provisioned) has none.
func (k *keepAlive) resolve() {
	if k == nil {
		return
	}
	k.once.Do(func() {
		if k.handler == nil {
			return
		}
		if f := idleCloser(k.handler.Transport); f != nil {
			k.closer.Store(&f)
		}
	})
}

// closeIdle closes the idle connections of the handler's transport, if
// a request went through it yet (none did: none is open).
func (k *keepAlive) closeIdle() {
	if k == nil {
		return
	}
	if f := k.closer.Load(); f != nil {
		(*f)()
	}
}

// idleCloser returns the function that closes the idle connections of a
// reverse_proxy transport, nil for a transport that has none to close.
// Caddy's HTTP transport keeps them in its *http.Transport (HTTP/1.1,
// HTTP/2 and h2c alike; not its experimental HTTP/3 one).
func idleCloser(rt http.RoundTripper) func() {
	switch t := rt.(type) {
	case *reverseproxy.HTTPTransport:
		if t.Transport != nil {
			return t.Transport.CloseIdleConnections
		}
	case interface{ CloseIdleConnections() }:
		return t.CloseIdleConnections
	}
	return nil
}

// CloseIdle closes the idle connections of the route's transport
// (connection.Route): the connection calls it, through the catalog's
// Options.Froze, when one of the daemon's instances freezes.
func (s *upstreamSource) CloseIdle() { s.keepAlive.closeIdle() }
