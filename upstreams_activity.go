package caddydicer

import (
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
)

// Idle by activity (R5r): the request path's share of caddy.standby_ignore.
// A request an instance ignores is proxied to it as any other while it
// runs, but not counted as its use (no idle time refreshed, not counted in
// flight by us); while it sleeps, it gets the asleep answer instead of
// waking it. caddy.standby_cpu is the idle loop's (internal/standby).

// ignoredBy reports whether r is one of the requests ig (an instance's
// caddy.standby_ignore, nil: none) ignores: its client's address (Caddy's
// client_ip, which follows trusted_proxies, else the remote address), its
// path as the client sent it (before any rewrite or strip_path_prefix),
// its User-Agent. No allocation but the client's address, read only for
// a label with a cidr item.
func ignoredBy(r *http.Request, ig *catalog.Ignore) bool {
	if ig == nil {
		return false
	}
	var client netip.Addr
	if ig.NeedsClient() {
		client = clientAddr(r)
	}
	path := r.URL.Path
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		path = orig.URL.Path
	}
	return ig.Match(client, path, r.Header.Get("User-Agent"))
}

// clientAddr is r's client as Caddy's client_ip has it, else the remote
// address; invalid when neither parses.
func clientAddr(r *http.Request) netip.Addr {
	ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if ip == "" {
		ip = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(ip); err == nil {
		return a
	}
	if host, _, err := net.SplitHostPort(ip); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a
		}
	}
	return netip.Addr{}
}

// asleepAnswer answers a request that found nothing routable on its
// route, when the instance it would wake ignores it (R5r): 200 with
// `Dicer-State: asleep` (or `waking`, one is on its way up), and the
// instance is not woken. When every instance Caddy would wake is backing
// off from a failed wake, the unavailable answer instead (503 with
// Retry-After): down, not asleep. nil: the request is not ignored, or
// there is nothing to wake (the usual answers follow).
func (s *upstreamSource) asleepAnswer(r *http.Request, snap *catalog.Snapshot, route catalog.Route, host string) []*reverseproxy.Upstream {
	ig, waking := snap.StandbyIgnore(route, host)
	if ig == nil || !ignoredBy(r, ig) {
		return nil
	}
	d := pages.Data{Kind: pages.KindAsleep, Host: r.Host, Message: "asleep"}
	if waking {
		d.Message = "waking"
	} else if s.conn.WakesOnRequest() {
		backingOff, retry := true, 0
		for _, wc := range snap.WakeCandidates(nil, route, host) {
			after, _, _ := s.conn.WakeBackoff(wc.ID)
			if after.IsZero() { // not backing off
				backingOff = false
				break
			}
			if secs := pages.RetrySeconds(time.Until(after)); retry == 0 || secs < retry {
				retry = secs
			}
		}
		if backingOff && retry > 0 {
			d = pages.Data{Kind: pages.KindUnavailable, Host: r.Host, RetryAfter: retry,
				Message: "The service could not be started."}
		}
	}
	if u := s.page(r, s.logger, d); u != nil {
		return []*reverseproxy.Upstream{u}
	}
	return nil
}
