package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(SwarmUpstreams{})
}

// SwarmUpstreams is a dynamic upstream source for reverse_proxy: the
// running tasks of the Docker Swarm services whose labels match the
// selector, or, without a selector, whose `caddy.host` label lists the
// request's host. It follows the manager's service, node and task
// container events, re-listing only the service an event names, and
// re-lists a service whose tasks are converging (a scale, an update, a
// task starting elsewhere) every 500ms until they have, any other every
// 10s, for the changes on other nodes that Swarm sends no event for. No
// request waits on the Engine and Caddy is never reloaded.
//
// Upstreams are the routable tasks (running, healthy if they have a
// health check, not being shut down) in name order; none means 503.
//
// A replicated service labelled `caddy.soft_limit=<n>` and
// `caddy.max_replicas=<m>` grows under load (R5j): while every routable
// task of a route for the host has more than n requests in flight through
// this Caddy, Caddy adds one replica (none while the service converges or
// a task is not ready, never beyond m), and takes one away once the load
// has fitted in one replica fewer for the service's
// `caddy.standby_after` (default 5m), down to `caddy.min_replicas`
// (default 1). The manager's API must then allow
// `POST /services/{id}/update`. Endpoint `vip` scales nothing.
type SwarmUpstreams struct {
	SwarmManager
	upstreamSource

	// Network is the overlay network to reach tasks on when their service
	// is attached to several, e.g. `frontend`. Default: the service's
	// `caddy.network` label, else its only network (Swarm's ingress
	// network does not count).
	Network string `json:"network,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (SwarmUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.swarm",
		New: func() caddy.Module { return new(SwarmUpstreams) },
	}
}

// Provision connects to the manager, or joins the shared connection.
func (u *SwarmUpstreams) Provision(ctx caddy.Context) error {
	return u.provision(ctx, &u.SwarmManager, u.Network)
}

// UnmarshalCaddyfile sets up the source from Caddyfile tokens, either
// the shorthand:
//
//	dynamic swarm [<selector> [<port>]]
//
// or a block with any of the settings:
//
//	dynamic swarm {
//		address <endpoint>
//		selector <selector>
//		port <port>
//		max_requests <n>
//		queue_size <n>
//		queue_timeout <duration>
//		network <network>
//		endpoint tasks|vip
//		readiness_timeout <duration>
//		labels caddy-dicer|caddy-docker-proxy|traefik|skip-foreign-protections...
//		follow <selector>
//		tls {
//			ca <file>
//			cert <file>
//			key <file>
//		}
//	}
func (u *SwarmUpstreams) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return u.unmarshal(d, "swarm", &u.SwarmManager, func(d *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
		if _, ok, err := settingAt(d, seen, "network"); !ok || err != nil {
			return ok, err
		}
		return true, oneValue(d, &u.Network)
	})
}

// Interface guards
var (
	_ caddy.Provisioner           = (*SwarmUpstreams)(nil)
	_ caddy.CleanerUpper          = (*SwarmUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*SwarmUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*SwarmUpstreams)(nil)
)
