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

	key  string
	conn *connection
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
	f, err := p.Daemon.follower()
	if err != nil {
		return fmt.Errorf("dicer: %w", err)
	}
	if p.conn, err = dial(ctx, f); err != nil {
		return fmt.Errorf("dicer: %w", err)
	}
	p.key = f.key
	return nil
}

// CertificateAllowed implements caddytls.OnDemandPermission.
func (p *DicerPermission) CertificateAllowed(_ context.Context, name string) error {
	return permit(p.conn, name)
}

// Cleanup releases the shared connection.
func (p *DicerPermission) Cleanup() error {
	release(p.key)
	return nil
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
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		ok, err := p.Daemon.unmarshalSetting(d, seen)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized dicer permission setting '%s'", d.Val())
		}
	}
	if err := p.Daemon.validateStatic(); err != nil {
		return d.Errf("%v", err)
	}
	return nil
}

// permit is R7: allowed only when an instance claims the name.
func permit(conn *connection, name string) error {
	if conn.catalog.Snapshot().Claimed(catalog.NormalizeHost(name)) {
		return nil
	}
	return fmt.Errorf("%w: no instance lists %q in its caddy.host label", caddytls.ErrPermissionDenied, name)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DicerPermission)(nil)
	_ caddy.CleanerUpper          = (*DicerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DicerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DicerPermission)(nil)
)
