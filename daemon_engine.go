package caddydicer

import (
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/docker"
)

// EngineConnection is where a Docker Engine's API is reached, and how: the
// settings the Docker and Swarm modules share (DockerEngine and
// SwarmManager embed it), in JSON and in the Caddyfile alike.
type EngineConnection struct {
	// Address is the Engine's API endpoint: `unix:///var/run/docker.sock`
	// or `tcp://host:2376` (for Swarm, a manager node's Engine).
	// Placeholders such as `{env.ENGINE}` are replaced at load. Default:
	// the `DOCKER_HOST` environment variable, else
	// `unix:///var/run/docker.sock`.
	Address string `json:"address,omitempty"`

	// TLS protects a TCP Engine; it is refused with a unix socket.
	// Example: `{"ca": "/etc/caddy/docker/ca.pem", "cert":
	// "/etc/caddy/docker/cert.pem", "key": "/etc/caddy/docker/key.pem"}`.
	// Default: plain TCP.
	TLS *DockerTLS `json:"tls,omitempty"`
}

// DockerTLS holds the files for a TLS-protected Engine, read at each config
// load.
type DockerTLS struct {
	// CA is a PEM file of the authorities that sign the Engine's
	// certificate, e.g. `/etc/caddy/docker/ca.pem`. Default: system roots.
	CA string `json:"ca,omitempty"`
	// Cert is the PEM file of the client certificate, given together with
	// Key, e.g. `/etc/caddy/docker/cert.pem`. Default: none, no client
	// certificate.
	Cert string `json:"cert,omitempty"`
	// Key is the PEM file of the client certificate's key, given together
	// with Cert, e.g. `/etc/caddy/docker/key.pem`. Default: none.
	Key string `json:"key,omitempty"`
}

// config is the Engine connection's adapter configuration, placeholders
// replaced and the default address filled in.
func (e *EngineConnection) config() docker.Config {
	repl := caddy.NewReplacer()
	cfg := docker.Config{Host: strings.TrimSpace(repl.ReplaceAll(e.Address, ""))}
	if e.TLS != nil {
		cfg.CAFile, cfg.CertFile, cfg.KeyFile = e.TLS.CA, e.TLS.Cert, e.TLS.Key
	}
	return cfg.Resolved()
}

// validateStatic checks the address and tls unless the address holds a
// placeholder (then they are checked at provision); the TLS files are read
// at provision.
func (e *EngineConnection) validateStatic() error {
	if strings.Contains(e.Address, "{") {
		return nil
	}
	return e.config().Check()
}

// unmarshalSetting parses `address <endpoint>` or a `tls { ca cert key }`
// block, if the dispenser is at one; seen catches a setting given twice.
func (e *EngineConnection) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	name, ok, err := settingAt(disp, seen, "address", "tls")
	if !ok || err != nil {
		return ok, err
	}
	if name == "tls" {
		e.TLS = new(DockerTLS)
		return true, unmarshalBlock(disp, "tls", map[string]*string{"ca": &e.TLS.CA, "cert": &e.TLS.Cert, "key": &e.TLS.Key})
	}
	return true, oneValue(disp, &e.Address)
}
