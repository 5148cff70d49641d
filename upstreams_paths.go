package caddydicer

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/rewrite"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// requestPath is the path a request is routed by (R2d), in the form
// catalog.RequestPath gives: see clientPath.
func requestPath(r *http.Request) string { return catalog.RequestPath(clientPath(r)) }

// clientPath is the decoded path the client sent (Caddy's original
// request), not one that a handler before reverse_proxy rewrote or
// stripped, so that `uri strip_prefix {dicer.path_prefix}` does not change
// where the request goes.
func clientPath(r *http.Request) string {
	if or, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && or.URL != nil {
		return or.URL.Path
	}
	return r.URL.Path
}

// strippedVar is the request variable holding the URL of the copy of the
// request whose prefix a source stripped: a retry asks GetUpstreams again
// with the same copy, and must not strip twice.
const strippedVar = "dicer_stripped_url"

// stripPathPrefix removes from r, reverse_proxy's copy of the request
// about to be sent, the caddy.path prefix that routes it (R2d) when the
// instances claiming it strip it (their caddy.strip_path label, else the
// source's strip_path_prefix: catalog.Snapshot.StripPrefix), once per
// copy, with Caddy's own prefix stripping (that of `uri strip_prefix`:
// case and escapes as Caddy's path matcher reads them).
func (s *upstreamSource) stripPathPrefix(r *http.Request, snap *catalog.Snapshot, route catalog.Route, host string) {
	if !snap.HasPaths() {
		return
	}
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if vars == nil || vars[strippedVar] == r.URL {
		return
	}
	p := snap.StripPrefix(route, host, false, s.StripPathPrefix)
	if p == "" {
		return
	}
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	rewrite.Rewrite{StripPathPrefix: p}.Rewrite(r, repl)
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
	vars[strippedVar] = r.URL
}

// routeFor is the source's route for r: with the client's path when one
// of the catalog's instances has a caddy.path label (R2d), which the
// catalog reads only for a host whose instances have one; else the route
// as it is.
func (s *upstreamSource) routeFor(r *http.Request, snap *catalog.Snapshot) catalog.Route {
	route := s.route
	if snap.HasPaths() {
		route.Path = clientPath(r)
	}
	return route
}

// routeAt is the source's route for the request path p ("" none); with
// exact, p is the prefix served (catalog.Route.PathExact).
func (s *upstreamSource) routeAt(p string, exact bool) catalog.Route {
	route := s.route
	route.Path, route.PathExact = p, exact
	return route
}

// PathPrefix is the longest path prefix that an instance serving r on
// the source's route claims (R2d), "" for none (the root): the value of
// {dicer.path_prefix} that the dicer_path_prefix handler (package
// handler) gives.
func (s *upstreamSource) PathPrefix(r *http.Request) string {
	snap := s.conn.Catalog().Snapshot()
	if !snap.HasPaths() {
		return ""
	}
	p := snap.PathPrefix(s.routeFor(r, snap), catalog.NormalizeHost(r.Host), false)
	if p == "/" {
		return ""
	}
	return p
}
