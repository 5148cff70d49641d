package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

func init() {
	caddy.RegisterModule(DockerPermission{})
}

// DockerPermission allows an on-demand TLS certificate only for a name that
// some container of a Docker Engine lists in its `caddy.host` label,
// whatever state that container is in, narrowed by `allow_suffix`,
// `selector` and `wildcards`; see DicerPermission.
type DockerPermission struct {
	DockerEngine
	hostPermission
}

// CaddyModule returns the Caddy module information.
func (DockerPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.docker",
		New: func() caddy.Module { return new(DockerPermission) },
	}
}

// Provision connects to the Engine, or joins the shared connection.
func (p *DockerPermission) Provision(ctx caddy.Context) error {
	return p.provision(ctx, &p.DockerEngine)
}

// UnmarshalCaddyfile sets up the permission from Caddyfile tokens:
//
//	permission docker {
//		allow_suffix        <domain>...
//		selector            <selector>
//		wildcards           allow|refuse
//		address             <endpoint>
//		published_port_host <host>
//		readiness_timeout   <duration>
//		labels              caddy-dicer|caddy-docker-proxy|traefik|skip-foreign-protections...
//		tls {
//			ca   <file>
//			cert <file>
//			key  <file>
//		}
//	}
func (p *DockerPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "docker", &p.DockerEngine)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DockerPermission)(nil)
	_ caddy.CleanerUpper          = (*DockerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DockerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DockerPermission)(nil)
)
