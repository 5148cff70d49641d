package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(DicerUpstreams{})
}

// DicerUpstreams is a dynamic upstream source for reverse_proxy: the
// instances of a Dicer daemon whose labels match the selector, or, without a
// selector, those whose `caddy.host` label lists the request's host. Each
// request is answered from an in-memory catalog that the daemon's events
// keep current; the daemon is never asked during a request.
//
// Upstreams are the routable instances (running, with an address, and
// healthy if they have a health check) in instance-name order. When none is,
// one instance that a connection wakes from standby is returned, if any;
// otherwise none, which reverse_proxy answers with 503.
type DicerUpstreams struct {
	DicerDaemon
	upstreamSource
}

// CaddyModule returns the Caddy module information.
func (DicerUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.dicer",
		New: func() caddy.Module { return new(DicerUpstreams) },
	}
}

// Provision connects to the daemon, or joins the shared connection.
func (u *DicerUpstreams) Provision(ctx caddy.Context) error {
	return u.provision(ctx, &u.DicerDaemon, "")
}

// UnmarshalCaddyfile sets up the source from Caddyfile tokens, either
// the shorthand:
//
//	dynamic dicer [<selector> [<port>]]
//
// or a block with any of the settings:
//
//	dynamic dicer {
//		address <target>
//		token <token>
//		selector <selector>
//		port <port>
//		max_requests <n>
//		queue_size <n>
//		queue_timeout <duration>
//		published_port_host <host>
//		readiness_timeout <duration>
//		tls {
//			ca <file>
//			server_name <name>
//		}
//	}
//
// A selector with spaces is quoted: `dynamic dicer "tier in (web,edge)" 8080`.
func (u *DicerUpstreams) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return u.unmarshal(d, "dicer", &u.DicerDaemon, nil)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DicerUpstreams)(nil)
	_ caddy.CleanerUpper          = (*DicerUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*DicerUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*DicerUpstreams)(nil)
)
