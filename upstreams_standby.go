package caddydicer

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// Scale to zero (R5) and pools that grow under load (R5j) live in
// internal/standby, internal/connectwake and internal/swarm, behind the
// connection's Scaling; these are the pieces of the request path that
// touch Caddy: reverse_proxy's in-flight counters and the stand-in
// upstream.

// recordUse notes a request routed to u, an instance with an Activity
// (labelled caddy.standby_after or caddy.soft_limit), and, for the first
// request to a dial address and one request per catalog.RelearnEvery,
// learns reverse_proxy's in-flight counter for it, known when the request
// ends (see hostOf); until then that request counts as in flight. Atomics
// only on the request path, no lock.
func recordUse(c *connection.Conn, r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	if c.Routed(a, u.Dial) {
		learnInFlight(r, a, u)
	}
}

// learnInFlight counts the request as in flight to a until it ends, and
// then learns reverse_proxy's in-flight counter of u (see hostOf).
func learnInFlight(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	root := a.Begin()
	ctx := r.Context()
	context.AfterFunc(ctx, func() { root.Learn(u.Dial, hostOf(ctx, u)) })
}

// hostOf returns reverse_proxy's Host of u, the in-flight counter it
// shares with every upstream of the same dial address, or nil if it was
// not filled in. reverse_proxy fills it in after GetUpstreams, then sets
// the http.reverse_proxy.upstream.* placeholders under the replacer's
// lock: finding them set orders that write before this read.
func hostOf(ctx context.Context, u *reverseproxy.Upstream) catalog.InFlight {
	repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return nil
	}
	if _, set := repl.Get("http.reverse_proxy.upstream.hostport"); !set || u.Host == nil {
		return nil
	}
	return u.Host
}

// holdContext is r's context with its client, whose share of max_held a
// request held for a wake counts under (R5d): Caddy's client_ip, which
// follows the server's trusted_proxies, else the remote address.
func holdContext(r *http.Request) context.Context {
	ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if ip == "" {
		ip = r.RemoteAddr
	}
	if client, ok := clients.OfString(ip); ok {
		return clients.With(r.Context(), client)
	}
	return r.Context()
}

// standInUpstream returns the upstream that answers 503 with this
// Retry-After (R5e, see standby.Waker.StandIn): reverse_proxy relays its
// answer to the client as it is. nil if there is none.
func standInUpstream(c *connection.Conn, retry time.Duration) *reverseproxy.Upstream {
	dial := c.StandIn(retry)
	if dial == "" {
		return nil
	}
	return &reverseproxy.Upstream{Dial: dial}
}
