package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

func init() {
	caddy.RegisterModule(SwarmPermission{})
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
//		labels            caddy-dicer|caddy-docker-proxy|traefik|skip-foreign-protections...
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

// Interface guards
var (
	_ caddy.Provisioner           = (*SwarmPermission)(nil)
	_ caddy.CleanerUpper          = (*SwarmPermission)(nil)
	_ caddyfile.Unmarshaler       = (*SwarmPermission)(nil)
	_ caddytls.OnDemandPermission = (*SwarmPermission)(nil)
)
