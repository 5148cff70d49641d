package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

func init() {
	caddy.RegisterModule(DicerPermission{})
}

// DicerPermission allows an on-demand TLS certificate only for a name that
// some instance of a Dicer daemon lists in its `caddy.host` label, whatever
// state that instance is in. A name that only a wildcard pattern
// (`*.example.com`) matches is refused unless `wildcards` is `allow`;
// `allow_suffix` and `selector` narrow who gets what. The answer comes
// from the in-memory catalog, so a scanner's handshakes never reach the
// daemon, and a refusal costs no allocation. Each host must still resolve
// to Caddy for the CA to validate it.
type DicerPermission struct {
	DicerDaemon
	hostPermission
}

// CaddyModule returns the Caddy module information.
func (DicerPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.dicer",
		New: func() caddy.Module { return new(DicerPermission) },
	}
}

// Provision connects to the daemon, or joins the shared connection.
func (p *DicerPermission) Provision(ctx caddy.Context) error {
	return p.provision(ctx, &p.DicerDaemon)
}

// UnmarshalCaddyfile sets up the permission from Caddyfile tokens:
//
//	permission dicer {
//		allow_suffix        <domain>...
//		selector            <selector>
//		wildcards           allow|refuse
//		address             <target>
//		token               <token>
//		published_port_host <host>
//		readiness_timeout   <duration>
//		tls {
//			ca          <file>
//			server_name <name>
//		}
//	}
//
// For several tenants on one daemon: `allow_suffix apps.example.com` and
// `selector caddy.tenant=trusted` give certificates only for names under
// apps.example.com that instances labelled caddy.tenant=trusted claim.
func (p *DicerPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "dicer", &p.DicerDaemon)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DicerPermission)(nil)
	_ caddy.CleanerUpper          = (*DicerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DicerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DicerPermission)(nil)
)
