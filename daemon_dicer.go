package caddydicer

import (
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dicer"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// DicerDaemon is how a module reaches a Dicer daemon. Every module (upstream
// source or TLS permission) that names the same daemon with the same
// settings shares one connection and one instance catalog, which outlive
// config reloads and close when no loaded config uses them.
type DicerDaemon struct {
	// Address is the daemon's gRPC endpoint: `unix:///path/to.sock`,
	// `unix-abstract:NAME`, or `host:port` for the daemon's TCP listener.
	// Placeholders such as `{env.DICER_ADDRESS}` are replaced at load.
	// Default: `unix:///run/dicer/dicer.sock`.
	Address string `json:"address,omitempty"`

	// Token authenticates to the daemon's TCP listener, where it is
	// required; it is refused with a unix socket. The token's fingerprint
	// part pins the daemon's TLS certificate. Prefer a read-only token
	// (`dicer token create caddy --scopes instances:read,events:read,networks:read`).
	// Placeholders are replaced at load and surrounding whitespace dropped,
	// so `{file./etc/caddy/dicer-token}` works. Default: none.
	Token string `json:"token,omitempty"`

	// PublishedPortHost is the host at which ports that instances publish
	// on every host address are reached, e.g. `10.0.0.5`. Default: the
	// daemon's host when Address is TCP and not loopback, else the gateway
	// address of the instance's network.
	PublishedPortHost string `json:"published_port_host,omitempty"`

	// TLS verifies a daemon whose certificate a CA signed, for a token
	// without a fingerprint; it is refused with a unix socket. Example:
	// `{"ca": "/etc/caddy/dicer-ca.pem"}`. Default: none; a token's
	// fingerprint pins the certificate, and without one the certificate is
	// verified against the system roots for the host of Address.
	TLS *DicerTLS `json:"tls,omitempty"`

	// Readiness holds readiness_timeout, the readiness probe's bound.
	Readiness
}

// DicerTLS verifies a CA-signed daemon certificate.
type DicerTLS struct {
	// CA is a PEM file of the certificate authorities to trust, re-read at
	// each config load. Example: `/etc/caddy/dicer-ca.pem`. Default: the
	// system roots.
	CA string `json:"ca,omitempty"`
	// ServerName is the name the daemon's certificate must carry, e.g.
	// `dicer.internal`. Default: the host of Address.
	ServerName string `json:"server_name,omitempty"`
}

// spec resolves the settings (placeholders) into what the Dicer adapter
// runs with; the adapter checks them and reads the CA file, once.
func (d *DicerDaemon) spec() (connSpec, error) {
	repl := caddy.NewReplacer()
	cfg := dicer.Config{
		Address: strings.TrimSpace(repl.ReplaceAll(d.Address, "")),
		Token:   strings.TrimSpace(repl.ReplaceAll(d.Token, "")),
	}
	if d.TLS != nil {
		cfg.CAFile, cfg.ServerName = d.TLS.CA, d.TLS.ServerName
	}
	pph := strings.TrimSpace(repl.ReplaceAll(d.PublishedPortHost, ""))
	if err := follow.CheckPublishedPortHost(pph); err != nil {
		return connSpec{}, err
	}
	a, err := dicer.New(cfg)
	if err != nil {
		return connSpec{}, err
	}
	spec := newConnSpec("dicer", a.Address(), pph, dicer.DaemonHost(a.Address()), []string{a.Key()}, a.Loop().Run)
	spec.scaling = connection.WakeOnConnect() // R5j grows a pool by a connection
	return spec, nil
}

// validateStatic checks the settings that need no placeholder replacement,
// so that `caddy adapt` already names a bad one.
func (d *DicerDaemon) validateStatic() error {
	if !strings.Contains(d.PublishedPortHost, "{") {
		if err := follow.CheckPublishedPortHost(strings.TrimSpace(d.PublishedPortHost)); err != nil {
			return err
		}
	}
	if strings.Contains(d.Address+d.Token, "{") {
		return nil // checked at provision, once placeholders are known
	}
	cfg := dicer.Config{Address: d.Address, Token: d.Token}
	if d.TLS != nil {
		// tls fits only a TCP daemon whose token has no fingerprint; the
		// CA file itself is read at provision.
		cfg.CAFile, cfg.ServerName = d.TLS.CA, d.TLS.ServerName
	}
	return cfg.Check()
}

// unmarshalSetting parses one daemon setting of a Caddyfile block, if the
// dispenser is at one; seen catches a setting given twice.
func (d *DicerDaemon) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	name, ok, err := settingAt(disp, seen, "address", "token", "published_port_host", "tls")
	if !ok || err != nil {
		return ok, err
	}
	if name == "tls" {
		d.TLS = new(DicerTLS)
		return true, unmarshalBlock(disp, "tls", map[string]*string{
			"ca":          &d.TLS.CA,
			"server_name": &d.TLS.ServerName,
		})
	}
	var value string
	if !disp.AllArgs(&value) {
		if name == "token" && value != "" {
			// ArgErr would quote the token, secret included.
			return true, settingErrf(disp, "token", "wants exactly one value, the token")
		}
		return true, disp.ArgErr()
	}
	switch name {
	case "address":
		d.Address = value
	case "token":
		d.Token = value
	case "published_port_host":
		d.PublishedPortHost = value
	}
	return true, nil
}

// Interface guards
var (
	_ daemonSettings = (*DicerDaemon)(nil)
)
