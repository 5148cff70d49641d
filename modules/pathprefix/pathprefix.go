// Package pathprefix holds the HTTP handlers (http.handlers) of this
// plugin: dicer_path_prefix, which gives the placeholder
// {dicer.path_prefix} (R2d).
package pathprefix

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

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

	source PathPrefixer
}

// PathPrefixer is an upstream source of this plugin, as the handler uses
// it: the root's sources (dicer, docker, swarm, multi) implement it.
type PathPrefixer interface {
	// PathPrefix is the caddy.path prefix that routes r on the source's
	// route, "" for none.
	PathPrefix(r *http.Request) string
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
	src, ok := mod.(PathPrefixer)
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
			return h.source.PathPrefix(r), true
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
	if _, ok := unm.(PathPrefixer); !ok {
		return nil, h.Errf("dicer_path_prefix: %s is not a caddy-dicer source (dicer, docker, swarm)", name)
	}
	return &PathPrefix{SourceRaw: caddyconfig.JSONModuleObject(unm, "source", name, nil)}, nil
}
