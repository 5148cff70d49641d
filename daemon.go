package caddydicer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicer"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
)

// Daemon is how a module reaches a Dicer daemon. Every module (upstream
// source or TLS permission) that names the same daemon with the same
// settings shares one connection and one instance catalog, which outlive
// config reloads and close when no loaded config uses them.
type Daemon struct {
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
	// without a fingerprint. Default: system roots.
	TLS *DaemonTLS `json:"tls,omitempty"`
}

// DaemonTLS verifies a CA-signed daemon certificate.
type DaemonTLS struct {
	// CA is a PEM file of the certificate authorities to trust, re-read at
	// each config load. Example: `/etc/caddy/dicer-ca.pem`.
	CA string `json:"ca,omitempty"`
	// ServerName is the name the daemon's certificate must carry. Default:
	// the host of Address.
	ServerName string `json:"server_name,omitempty"`
}

// settings are a daemon's connection settings, as each backend defines
// them in its Caddyfile and JSON.
type settings interface {
	// follower resolves the settings into what opens a shared connection.
	follower() (follower, error)
	// unmarshalSetting parses the setting the dispenser is at, if it is
	// one of the daemon's; seen catches a setting given twice.
	unmarshalSetting(d *caddyfile.Dispenser, seen map[string]bool) (bool, error)
	// validateStatic checks what can be checked before placeholders are
	// replaced, so that `caddy adapt` already names a bad setting.
	validateStatic() error
}

// startupWait bounds how long Provision waits for a daemon's first listing,
// so that a daemon which is down never stops Caddy from starting (R9).
const startupWait = 3 * time.Second

// connections holds the shared daemon connections across config reloads.
var connections = caddy.NewUsagePool()

// connection is one followed daemon: its catalog, fed by a background
// adapter whose lifetime belongs to the pool entry, not to any module.
type connection struct {
	catalog *catalog.Catalog
	// settled is closed at the first listing, or after startupWait without
	// one: modules wait for it once per connection, not once each.
	settled chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// Destruct stops following the daemon; the pool calls it when the last
// module using the connection is cleaned up.
func (c *connection) Destruct() error {
	c.cancel()
	<-c.done
	return nil
}

// follower is what an adapter needs to open a shared connection.
type follower struct {
	// key identifies the daemon and every setting that shapes the
	// connection; modules with equal keys share it.
	key  string
	opts catalog.Options
	run  func(ctx context.Context, sink catalog.Sink)
}

// dial returns the shared connection for f, starting it if needed, once it
// has settled: listed, or given startupWait to (R9). ctx ending stops the
// wait, not the connection.
func dial(ctx context.Context, f follower) (*connection, error) {
	v, _, err := connections.LoadOrNew(f.key, func() (caddy.Destructor, error) {
		runCtx, cancel := context.WithCancel(context.Background())
		c := &connection{
			catalog: catalog.New(f.opts),
			settled: make(chan struct{}),
			cancel:  cancel,
			done:    make(chan struct{}),
		}
		go func() {
			defer close(c.done)
			f.run(runCtx, c.catalog)
		}()
		go c.settle(runCtx, f.opts.Logger)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	c := v.(*connection)
	select {
	case <-c.settled:
	case <-ctx.Done():
	}
	return c, nil
}

// settle closes settled at the first listing or after startupWait, saying
// once that the daemon has not been listed yet.
func (c *connection) settle(ctx context.Context, logger *zap.Logger) {
	defer close(c.settled)
	timer := time.NewTimer(startupWait)
	defer timer.Stop()
	select {
	case <-c.catalog.Ready():
	case <-timer.C:
		logger.Warn("daemon not listed yet; its routes answer 503 and its permission refuses until it is reached",
			zap.Duration("waited", startupWait))
	case <-ctx.Done():
	}
}

// release gives back a connection from dial.
func release(key string) {
	if key != "" {
		_, _ = connections.Delete(key)
	}
}

// follower resolves the settings (placeholders) into what the Dicer
// adapter runs with; the adapter checks them and reads the CA file.
func (d *Daemon) follower() (follower, error) {
	repl := caddy.NewReplacer()
	cfg := dicer.Config{
		Address: strings.TrimSpace(repl.ReplaceAll(d.Address, "")),
		Token:   strings.TrimSpace(repl.ReplaceAll(d.Token, "")),
	}
	if d.TLS != nil {
		cfg.CAFile, cfg.ServerName = d.TLS.CA, d.TLS.ServerName
	}
	pph := strings.TrimSpace(repl.ReplaceAll(d.PublishedPortHost, ""))
	a, err := dicer.New(cfg)
	if err != nil {
		return follower{}, err
	}
	return newFollower("dicer", a.Address(), pph, dicer.DaemonHost(a.Address()), []string{a.Key()}, a.Loop().Run), nil
}

// newFollower puts together what opens a shared connection to a backend's
// daemon at address. The key holds every setting that shapes the
// connection, hashed since it may hold a token. The logger follows Caddy's
// current default logger; the adapter adds the address to its own lines,
// the catalog gets it here.
func newFollower(backend, address, publishedPortHost, daemonHost string, settings []string,
	run func(ctx context.Context, sink catalog.Sink, logger *zap.Logger),
) follower {
	logger := daemonLogger(backend)
	key := append([]string{backend, address, publishedPortHost}, settings...)
	sum := sha256.Sum256([]byte(strings.Join(key, "\x00")))
	return follower{
		key: hex.EncodeToString(sum[:]),
		opts: catalog.Options{
			PublishedPortHost: publishedPortHost,
			DaemonHost:        daemonHost,
			Logger:            logger.With(zap.String("address", address)),
		},
		run: func(ctx context.Context, sink catalog.Sink) { run(ctx, sink, logger) },
	}
}

// validateStatic checks the settings that need no placeholder replacement,
// so that `caddy adapt` already names a bad one.
func (d *Daemon) validateStatic() error {
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
func (d *Daemon) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	name := disp.Val()
	switch name {
	case "address", "token", "published_port_host", "tls":
	default:
		return false, nil
	}
	if seen[name] {
		return true, disp.Errf("%s has already been specified", name)
	}
	seen[name] = true
	if name == "tls" {
		return true, d.unmarshalTLS(disp)
	}
	var value string
	if !disp.AllArgs(&value) {
		if name == "token" && value != "" {
			// ArgErr would quote the token, secret included.
			return true, disp.Err("token: wants exactly one value, the token")
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

func (d *Daemon) unmarshalTLS(disp *caddyfile.Dispenser) error {
	d.TLS = new(DaemonTLS)
	return unmarshalBlock(disp, "tls", map[string]*string{
		"ca":          &d.TLS.CA,
		"server_name": &d.TLS.ServerName,
	})
}

// unmarshalBlock parses a block of settings that take one value each, such
// as `tls { ca <file> }`, into the strings named by settings.
func unmarshalBlock(disp *caddyfile.Dispenser, block string, settings map[string]*string) error {
	if disp.NextArg() {
		return disp.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := disp.Nesting(); disp.NextBlock(nesting); {
		name := disp.Val()
		value, ok := settings[name]
		if !ok {
			names := slices.Sorted(maps.Keys(settings))
			return disp.Errf("unrecognized %s setting '%s' (want %s)", block, name, strings.Join(names, ", "))
		}
		if seen[name] {
			return disp.Errf("%s %s has already been specified", block, name)
		}
		seen[name] = true
		if !disp.AllArgs(value) {
			return disp.ArgErr()
		}
	}
	return nil
}

// DockerEngine is how a module reaches a Docker Engine. Every module that
// names the same Engine with the same settings shares one connection and
// one container catalog, which outlive config reloads. The plugin only
// reads from the Engine.
type DockerEngine struct {
	// Address is the Engine's API endpoint: `unix:///var/run/docker.sock`
	// or `tcp://host:2376`. Placeholders such as `{env.ENGINE}` are
	// replaced at load. Default: the `DOCKER_HOST` environment variable,
	// else `unix:///var/run/docker.sock`.
	Address string `json:"address,omitempty"`

	// PublishedPortHost is the host at which ports that containers publish
	// on every host address are reached, e.g. `10.0.0.5`. Default: the
	// Engine's host when Address is TCP and not loopback, else the gateway
	// address of the container's network.
	PublishedPortHost string `json:"published_port_host,omitempty"`

	// TLS protects a TCP Engine. Default: plain TCP.
	TLS *DockerTLS `json:"tls,omitempty"`
}

// DockerTLS holds the files for a TLS-protected Engine, read at each config
// load.
type DockerTLS struct {
	// CA is a PEM file of the authorities that sign the Engine's
	// certificate. Default: system roots.
	CA string `json:"ca,omitempty"`
	// Cert and Key are the client certificate and its key, given together.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// config is the adapter configuration, placeholders replaced.
func (e *DockerEngine) config() (docker.Config, string) {
	repl := caddy.NewReplacer()
	cfg := docker.Config{Host: strings.TrimSpace(repl.ReplaceAll(e.Address, ""))}
	if e.TLS != nil {
		cfg.CAFile, cfg.CertFile, cfg.KeyFile = e.TLS.CA, e.TLS.Cert, e.TLS.Key
	}
	return cfg.Resolved(), strings.TrimSpace(repl.ReplaceAll(e.PublishedPortHost, ""))
}

func (e *DockerEngine) follower() (follower, error) {
	cfg, pph := e.config()
	a, err := docker.New(cfg)
	if err != nil {
		return follower{}, err
	}
	return newFollower("docker", a.Address(), pph, docker.DaemonHost(a.Address()), []string{a.Key()}, a.Loop().Run), nil
}

func (e *DockerEngine) validateStatic() error {
	if strings.Contains(e.Address, "{") {
		return nil // checked at provision, once placeholders are known
	}
	cfg, _ := e.config()
	return cfg.Check() // the TLS files are read at provision
}

func (e *DockerEngine) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	name := disp.Val()
	switch name {
	case "address", "published_port_host", "tls":
	default:
		return false, nil
	}
	if seen[name] {
		return true, disp.Errf("%s has already been specified", name)
	}
	seen[name] = true
	switch name {
	case "tls":
		e.TLS = new(DockerTLS)
		return true, unmarshalBlock(disp, "tls", map[string]*string{"ca": &e.TLS.CA, "cert": &e.TLS.Cert, "key": &e.TLS.Key})
	case "address":
		return true, oneValue(disp, &e.Address)
	default:
		return true, oneValue(disp, &e.PublishedPortHost)
	}
}

// oneValue reads the single value of the setting the dispenser is at.
func oneValue(disp *caddyfile.Dispenser, value *string) error {
	if !disp.AllArgs(value) {
		return disp.ArgErr()
	}
	return nil
}
