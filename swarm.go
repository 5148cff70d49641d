package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
)

func init() {
	caddy.RegisterModule(SwarmUpstreams{})
	caddy.RegisterModule(SwarmPermission{})
}

// SwarmManager is how a module reaches a Docker Swarm: through the Engine
// API of one of its manager nodes, read-only but for the replica count of
// a service labelled `caddy.max_replicas` (R5j). Every module that names the
// same manager with the same settings shares one connection and one
// catalog, which outlive config reloads.
//
// Each service is labelled as a container would be (`caddy.host`,
// `caddy.port`, any label a selector reads): the service's own labels,
// which Compose's `deploy.labels` set. Its running tasks are the
// instances, each reached at its own address on the service's overlay
// network (Caddy must be attached to that network: run it as a service
// or container on an attachable overlay), unless Endpoint is `vip`.
type SwarmManager struct {
	// EngineConnection holds address and tls: where the manager's Engine is
	// reached, `unix:///var/run/docker.sock` when Caddy runs on a manager
	// node, else e.g. `tcp://manager:2376`, as for the Docker modules.
	EngineConnection

	// Endpoint is where requests go: `tasks`, each running task at its own
	// address, which Caddy balances over (its lb_policy, retries and
	// passive health checks per task), taking a task out as soon as Swarm
	// shuts it down; or `vip`, the service's virtual IP, which Swarm's
	// IPVS balances per connection (one upstream per service, so Caddy's
	// policies see one; a task being shut down gets new connections until
	// Swarm takes it out of the VIP). Default: `tasks`.
	Endpoint string `json:"endpoint,omitempty"`

	// Readiness holds readiness_timeout, the readiness probe's bound.
	Readiness
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
//		network <network>
//		endpoint tasks|vip
//		readiness_timeout <duration>
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

// SwarmPermission allows an on-demand TLS certificate only for a name that
// some Docker Swarm service lists in its `caddy.host` label, whatever the
// state of its tasks (a service scaled to zero included), narrowed by
// `allow_suffix`, `selector` and `wildcards`; see DicerPermission.
type SwarmPermission struct {
	SwarmManager
	hostPermission
}

// CaddyModule returns the Caddy module information.
func (SwarmPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.swarm",
		New: func() caddy.Module { return new(SwarmPermission) },
	}
}

// Provision connects to the manager, or joins the shared connection.
func (p *SwarmPermission) Provision(ctx caddy.Context) error {
	return p.provision(ctx, &p.SwarmManager)
}

// UnmarshalCaddyfile sets up the permission from Caddyfile tokens:
//
//	permission swarm {
//		allow_suffix      <domain>...
//		selector          <selector>
//		wildcards         allow|refuse
//		address           <endpoint>
//		endpoint          tasks|vip
//		readiness_timeout <duration>
//		tls {
//			ca   <file>
//			cert <file>
//			key  <file>
//		}
//	}
//
// endpoint matters only to share the connection of routes that set it.
func (p *SwarmPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "swarm", &p.SwarmManager)
}

// config is the adapter configuration, placeholders replaced.
func (m *SwarmManager) config() swarm.Config {
	return swarm.Config{Docker: m.EngineConnection.config(), Endpoint: m.Endpoint}
}

// spec resolves the settings into what the Swarm adapter runs with.
func (m *SwarmManager) spec() (connSpec, error) {
	a, err := swarm.New(m.config())
	if err != nil {
		return connSpec{}, err
	}
	spec := newConnSpec("swarm", a.Address(), "", docker.DaemonHost(a.Address()), []string{a.Key()}, a.Loop().Run)
	logger := spec.opts.Logger
	spec.scaler = func(cat *catalog.Catalog, grew func()) (*swarm.Scaler, error) {
		return a.Scaler(cat, logger, swarm.ScaleOptions{Grew: grew}) // endpoint vip: none
	}
	return spec, nil
}

// validateStatic checks the settings that need no placeholder replacement.
func (m *SwarmManager) validateStatic() error {
	// The endpoint alone: the Engine's settings are the EngineConnection's.
	if err := (swarm.Config{Endpoint: m.Endpoint, Docker: docker.Config{Host: docker.DefaultHost}}).Check(); err != nil {
		return err
	}
	return m.EngineConnection.validateStatic()
}

// unmarshalSetting parses one manager setting of a Caddyfile block, if the
// dispenser is at one; seen catches a setting given twice.
func (m *SwarmManager) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	if ok, err := m.EngineConnection.unmarshalSetting(disp, seen); ok || err != nil {
		return ok, err
	}
	if _, ok, err := settingAt(disp, seen, "endpoint"); !ok || err != nil {
		return ok, err
	}
	if err := oneValue(disp, &m.Endpoint); err != nil {
		return true, err
	}
	if m.Endpoint != swarm.EndpointTasks && m.Endpoint != swarm.EndpointVIP {
		return true, settingErrf(disp, "endpoint", "%q is neither %s nor %s", m.Endpoint, swarm.EndpointTasks, swarm.EndpointVIP)
	}
	return true, nil
}

// Interface guards
var (
	_ daemonSettings = (*SwarmManager)(nil)

	_ caddy.Provisioner           = (*SwarmUpstreams)(nil)
	_ caddy.CleanerUpper          = (*SwarmUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*SwarmUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*SwarmUpstreams)(nil)

	_ caddy.Provisioner           = (*SwarmPermission)(nil)
	_ caddy.CleanerUpper          = (*SwarmPermission)(nil)
	_ caddyfile.Unmarshaler       = (*SwarmPermission)(nil)
	_ caddytls.OnDemandPermission = (*SwarmPermission)(nil)
)
