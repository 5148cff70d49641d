package caddydicer

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/rewrite"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
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
// about to be sent, the caddy.path prefix that routes it (R2d), once per
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
	p := snap.PathPrefix(route, host, false)
	if p == "" || p == "/" {
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

// pathPrefix is the longest path prefix that an instance serving r on the
// source's route claims (R2d), "" for none (the root): the value of
// {dicer.path_prefix}.
func (s *upstreamSource) pathPrefix(r *http.Request) string {
	snap := s.conn.catalog.Snapshot()
	if !snap.HasPaths() {
		return ""
	}
	p := snap.PathPrefix(s.routeFor(r, snap), catalog.NormalizeHost(r.Host), false)
	if p == "/" {
		return ""
	}
	return p
}

func init() {
	caddy.RegisterModule(PathPrefix{})
	httpcaddyfile.RegisterHandlerDirective("dicer_path_prefix", parsePathPrefix)
	httpcaddyfile.RegisterDirectiveOrder("dicer_path_prefix", httpcaddyfile.Before, "map")
}

// PathPrefix is an HTTP handler that gives the placeholder
// `{dicer.path_prefix}`: the longest path prefix that an instance of its
// source claims in its `caddy.path` label for the request (R2d), the one
// whose instances reverse_proxy sends it to; empty when none claims one.
// Its source is a dynamic upstream source of this plugin, written as
// after `dynamic` in reverse_proxy, normally the same as the route's:
//
//	dicer_path_prefix docker
//	uri strip_prefix {dicer.path_prefix}
//	reverse_proxy {
//		dynamic docker
//	}
//
// The value is worked out when a later handler reads it, from the path
// the client sent; reading it costs a lookup per path segment. The source
// shares the daemon connection of any other source with the same
// settings, and is listed as a route of it by the admin API.
type PathPrefix struct {
	// SourceRaw is the upstream source: `{"source": "docker", ...}`.
	SourceRaw json.RawMessage `json:"source,omitempty" caddy:"namespace=http.reverse_proxy.upstreams inline_key=source"`

	source interface{ pathPrefix(*http.Request) string }
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*PathPrefix)(nil)
	_ caddyhttp.MiddlewareHandler = (*PathPrefix)(nil)
)

// CaddyModule returns the Caddy module information.
func (PathPrefix) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.dicer_path_prefix",
		New: func() caddy.Module { return new(PathPrefix) },
	}
}

// Provision loads the source, which joins its daemon's connection.
func (h *PathPrefix) Provision(ctx caddy.Context) error {
	if h.SourceRaw == nil {
		return setting.Errorf("source", "missing: a dynamic upstream source of caddy-dicer (dicer, docker, swarm)")
	}
	mod, err := ctx.LoadModule(h, "SourceRaw")
	if err != nil {
		return fmt.Errorf("loading the source of dicer_path_prefix: %w", err)
	}
	src, ok := mod.(interface{ pathPrefix(*http.Request) string })
	if !ok {
		return setting.Errorf("source", "%T is not a caddy-dicer source (dicer, docker, swarm)", mod)
	}
	h.source = src
	return nil
}

// ServeHTTP adds the placeholder, evaluated when read, and calls next.
func (h *PathPrefix) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Map(func(key string) (any, bool) {
			if key != pathPrefixPlaceholder {
				return nil, false
			}
			return h.source.pathPrefix(r), true
		})
	}
	return next.ServeHTTP(w, r)
}

// pathPrefixPlaceholder is the placeholder PathPrefix gives.
const pathPrefixPlaceholder = "dicer.path_prefix"

// parsePathPrefix sets up the handler from Caddyfile tokens:
//
//	dicer_path_prefix <source> [<its settings, as after dynamic <source>>]
func parsePathPrefix(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h.Next() // directive name
	if !h.NextArg() {
		return nil, h.ArgErr()
	}
	name := h.Val()
	unm, err := caddyfile.UnmarshalModule(h.Dispenser, "http.reverse_proxy.upstreams."+name)
	if err != nil {
		return nil, err
	}
	if _, ok := unm.(interface{ pathPrefix(*http.Request) string }); !ok {
		return nil, h.Errf("dicer_path_prefix: %s is not a caddy-dicer source (dicer, docker, swarm)", name)
	}
	return &PathPrefix{SourceRaw: caddyconfig.JSONModuleObject(unm, "source", name, nil)}, nil
}
