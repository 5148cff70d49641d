package caddydicer

import (
	"context"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// hostPermission is R7 whatever the daemon: a certificate only for a host
// that some instance claims.
type hostPermission struct {
	key  string
	conn *connection
}

// provision joins the daemon's shared connection.
func (p *hostPermission) provision(ctx caddy.Context, daemon daemonSettings) error {
	var err error
	if p.conn, p.key, err = open(ctx, daemon); err != nil {
		return err
	}
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
		ok, err := unmarshalDaemonSetting(d, daemon, seen)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized %s permission setting '%s'", name, d.Val())
		}
	}
	if err := daemon.validateStatic(); err != nil {
		return staticErr(d, err)
	}
	return nil
}
