package caddydicer

import (
	"context"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// DicerPermission allows an on-demand TLS certificate only for a name that
// some instance of a Dicer daemon lists in its `caddy.host` label, whatever
// state that instance is in. The answer comes from the in-memory catalog,
// so a scanner's handshakes never reach the daemon. Each host must still
// resolve to Caddy for the CA to validate it.
type DicerPermission struct {
	Daemon
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
	return p.provision(ctx, &p.Daemon)
}

// UnmarshalCaddyfile sets up the permission from Caddyfile tokens:
//
//	permission dicer {
//		address             <target>
//		token               <token>
//		published_port_host <host>
//		tls {
//			ca          <file>
//			server_name <name>
//		}
//	}
func (p *DicerPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "dicer", &p.Daemon)
}

// DockerPermission allows an on-demand TLS certificate only for a name that
// some container of a Docker Engine lists in its `caddy.host` label,
// whatever state that container is in; see DicerPermission.
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
//		address             <endpoint>
//		published_port_host <host>
//		tls {
//			ca   <file>
//			cert <file>
//			key  <file>
//		}
//	}
func (p *DockerPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "docker", &p.DockerEngine)
}

// hostPermission is R7 whatever the daemon: a certificate only for a host
// that some instance claims.
type hostPermission struct {
	key  string
	conn *connection
}

func (p *hostPermission) provision(ctx caddy.Context, daemon daemonSettings) error {
	spec, err := daemon.spec()
	if err != nil {
		return err
	}
	if p.conn, err = dial(ctx, spec); err != nil {
		return err
	}
	p.key = spec.key
	return nil
}

// CertificateAllowed implements caddytls.OnDemandPermission: allowed only
// when an instance claims the name (R7). An allowed name costs a map lookup
// and no allocation.
func (p *hostPermission) CertificateAllowed(_ context.Context, name string) error {
	if p.conn.catalog.Snapshot().Claimed(catalog.NormalizeHost(name)) {
		return nil
	}
	return fmt.Errorf("%w: no instance lists %q in its caddy.host label", caddytls.ErrPermissionDenied, name)
}

// Cleanup releases the shared connection.
func (p *hostPermission) Cleanup() error {
	release(p.key)
	p.key = ""
	return nil
}

func (p *hostPermission) unmarshal(d *caddyfile.Dispenser, name string, daemon daemonSettings) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		ok, err := daemon.unmarshalSetting(d, seen)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized %s permission setting '%s'", name, d.Val())
		}
	}
	if err := daemon.validateStatic(); err != nil {
		return d.Errf("%v", err)
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DicerPermission)(nil)
	_ caddy.CleanerUpper          = (*DicerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DicerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DicerPermission)(nil)

	_ caddy.Provisioner           = (*DockerPermission)(nil)
	_ caddy.CleanerUpper          = (*DockerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DockerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DockerPermission)(nil)
)
