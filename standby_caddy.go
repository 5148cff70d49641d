package caddydicer

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// Scale to zero on Docker lives in internal/standby; these are the few
// pieces of it that touch Caddy: the pool that shares one Engine's state
// between connections (R5f), reverse_proxy's in-flight counters, and the
// stand-in upstreams.

// joinStandby gives connection c its part of the scale to zero that spec
// asks for (spec.actions set): the Engine's shared state, from the pool
// when spec names the Engine, else one of c's own. It returns the pool key
// to release when c is gone ("" for none).
func joinStandby(ctx context.Context, c *connection, spec connSpec) (*standby.Waker, string, error) {
	opts := spec.standbyOptions
	opts.Counted = func(r standby.WakeResult) { c.metrics.wakes(string(r)).Inc() }
	opts.Started = func(cause standby.WakeCause) { c.metrics.wakesStarted(cause).Inc() } // R5j, R5k
	if spec.standbyEngine == "" {
		return standby.New(ctx, spec.actions, c.catalog, spec.opts.Logger, opts), "", nil
	}
	eng, key, err := acquireStandbyEngine(spec.standbyEngine, spec.actions)
	if err != nil {
		return nil, "", err
	}
	return standby.Join(ctx, eng, c.catalog, spec.opts.Logger, opts), key, nil
}

// acquireStandbyEngine returns the shared state of the Engine key names,
// made with actions if it is the first connection to it; release it with
// release(poolKey).
func acquireStandbyEngine(key string, actions standby.Actions) (*standby.Engine, string, error) {
	poolKey := "standby\x00" + key
	v, _, err := connections.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		return standby.NewEngine(actions), nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(*standby.Engine), poolKey, nil
}

// record notes a request routed to a labelled instance (standby.Waker.Routed)
// and, for the first request to a dial address and one request per
// catalog.RelearnEvery, reverse_proxy's in-flight counter for it, known
// when the request ends (see hostOf); until then that request counts as
// in flight. Atomics only on the request path, no lock.
func record(w *standby.Waker, r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	if w.Routed(a, u.Dial) {
		beginLearning(r, a, u)
	}
}

// learnInFlight is record without scale to zero (Swarm's pools, R5j):
// only reverse_proxy's in-flight counter is learnt, as record learns it.
func learnInFlight(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
	if a.Learning(u.Dial, time.Now()) {
		beginLearning(r, a, u)
	}
}

// beginLearning counts the request as in flight to a until it ends, and
// then learns reverse_proxy's in-flight counter of u from it.
func beginLearning(r *http.Request, a *catalog.Activity, u *reverseproxy.Upstream) {
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

// standInUpstream returns the upstream that answers 503 with this
// Retry-After (R5e, see standby.Waker.StandIn): reverse_proxy relays its
// answer to the client as it is. nil if there is none.
func standInUpstream(w *standby.Waker, retry time.Duration) *reverseproxy.Upstream {
	dial := w.StandIn(retry)
	if dial == "" {
		return nil
	}
	return &reverseproxy.Upstream{Dial: dial}
}

// Interface guards
var _ caddy.Destructor = (*standby.Engine)(nil)
