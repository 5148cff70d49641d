package caddydicer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

func init() {
	caddy.RegisterModule(DaemonsPermission{})
}

// DaemonsPermission allows an on-demand TLS certificate for a name that
// any of several daemons allows: Caddy takes one `permission` module, and
// a site served by the instances of several daemons (`dynamic multi`)
// needs certificates for the hosts claimed on each. Each daemon is asked
// as its own permission module would be (`permission dicer`, `permission
// docker`), with that module's settings, so `allow_suffix`, `selector` and
// `wildcards` hold per daemon. The answer comes from the daemons'
// in-memory catalogs, in the order given, and a refusal costs no
// allocation.
type DaemonsPermission struct {
	// Daemons are the daemons to ask, each as the JSON of its own
	// permission module, whose name is `module`: `[{"module": "dicer",
	// "address": "unix:///run/dicer/dicer.sock"}, {"module": "docker",
	// "allow_suffix": ["apps.example.com"]}]`. Any permission module of
	// this plugin that follows a daemon fits (each backend's). A name is
	// allowed when one of them allows it. Required: at least one.
	DaemonsRaw []json.RawMessage `json:"daemons,omitempty" caddy:"namespace=tls.permission inline_key=module"`

	perms []*hostPermission
}

// daemonPermission is a permission module that follows one daemon: the
// kinds of daemon a DaemonsPermission block may name are the
// `tls.permission.*` modules that implement it, so a backend that
// registers its permission module (embedding hostPermission) is one more
// kind, with nothing to add here.
type daemonPermission interface {
	caddytls.OnDemandPermission
	daemonPermission() *hostPermission
}

func (p *hostPermission) daemonPermission() *hostPermission { return p }

// daemonKinds lists the kinds of the registered backends that have a
// permission, for errors: "dicer, docker, swarm".
func daemonKinds() string {
	return strings.Join(diceradmin.Kinds(diceradmin.PermissionNamespace), ", ")
}

// isDaemonKind reports whether kind names a daemon permission.
func isDaemonKind(kind string) bool {
	info, err := caddy.GetModule(diceradmin.PermissionNamespace + "." + kind)
	if err != nil {
		return false
	}
	_, ok := info.New().(daemonPermission)
	return ok
}

// errNoDaemonAllows is the refusal when no daemon allows the name, made
// once (no allocation for a scanner's names); each daemon's permission logs
// its own reason at debug level.
var errNoDaemonAllows = fmt.Errorf("%w: none of the daemons allows the name (each daemon's reason is logged at debug level)", caddytls.ErrPermissionDenied)

// CaddyModule returns the Caddy module information.
func (DaemonsPermission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.daemons",
		New: func() caddy.Module { return new(DaemonsPermission) },
	}
}

// Provision loads each daemon's permission, which connects to its daemon
// or joins the shared connection. An error names the daemon by its place
// in the list and its module.
func (p *DaemonsPermission) Provision(ctx caddy.Context) error {
	if len(p.DaemonsRaw) == 0 {
		return fmt.Errorf("daemons: wants at least one daemon's permission, such as {\"module\": \"dicer\"} (one of %s)", daemonKinds())
	}
	p.perms = p.perms[:0]
	for i, raw := range p.DaemonsRaw {
		// One at a time, for errors that say which daemon.
		slot := daemonSlot{Raw: raw}
		mod, err := ctx.LoadModule(&slot, "Raw")
		if err != nil {
			return fmt.Errorf("daemons[%d]: %w", i, err)
		}
		perm, ok := mod.(daemonPermission)
		if !ok {
			return fmt.Errorf("daemons[%d]: %s is not a daemon's permission (want one of %s)",
				i, mod.(caddy.Module).CaddyModule().ID, daemonKinds())
		}
		p.perms = append(p.perms, perm.daemonPermission())
	}
	return nil
}

// daemonSlot holds one daemon's permission for ctx.LoadModule.
type daemonSlot struct {
	Raw json.RawMessage `caddy:"namespace=tls.permission inline_key=module"`
}

// CertificateAllowed implements caddytls.OnDemandPermission: allowed when
// one of the daemons' permissions allows name, asked in order (R7, R7a).
// A refusal costs each daemon's index lookups and no allocation.
func (p *DaemonsPermission) CertificateAllowed(ctx context.Context, name string) error {
	var failed error
	for _, perm := range p.perms {
		err := perm.CertificateAllowed(ctx, name)
		if err == nil {
			return nil
		}
		if failed == nil && !errors.Is(err, caddytls.ErrPermissionDenied) {
			failed = err // not a refusal: say so rather than refuse quietly
		}
	}
	if failed != nil {
		return failed
	}
	return errNoDaemonAllows
}

// UnmarshalCaddyfile sets up the permission from Caddyfile tokens: one
// block per daemon, each named after its daemon's own permission module
// and taking exactly that module's settings:
//
//	permission daemons {
//		dicer {
//			address unix:///run/dicer/dicer.sock
//		}
//		dicer {
//			address 10.0.0.7:7443
//			token {env.DICER_B_TOKEN}
//			allow_suffix b.example.com
//		}
//		docker
//	}
//
// A block without settings (`docker`) is the daemon's defaults. Each
// error names the line of the block, or of its setting, at fault.
func (p *DaemonsPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		kind := d.Val()
		if !isDaemonKind(kind) {
			return d.Errf("unrecognized daemon '%s' (want one of %s, each a block of its permission's settings)", kind, daemonKinds())
		}
		unm, err := caddyfile.UnmarshalModule(d, "tls.permission."+kind)
		if err != nil {
			return err // the daemon's own error, at its setting's line
		}
		p.DaemonsRaw = append(p.DaemonsRaw, caddyconfig.JSONModuleObject(unm, "module", kind, nil))
	}
	if len(p.DaemonsRaw) == 0 {
		return d.Errf("permission daemons: wants a block per daemon, such as `dicer { address ... }` (one of %s)", daemonKinds())
	}
	return nil
}

// Interface guards
var (
	_ daemonPermission = (*DicerPermission)(nil)
	_ daemonPermission = (*DockerPermission)(nil)
	_ daemonPermission = (*SwarmPermission)(nil)

	_ caddy.Provisioner           = (*DaemonsPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DaemonsPermission)(nil)
	_ caddytls.OnDemandPermission = (*DaemonsPermission)(nil)
)
