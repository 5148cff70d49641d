package caddydicer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// daemonSettings are a daemon's connection settings, as each backend
// (DicerDaemon for Dicer, DockerEngine for Docker, SwarmManager for Swarm)
// defines them in its Caddyfile and JSON. The daemon-neutral modules,
// upstreamSource and hostPermission, know a backend only through them.
type daemonSettings interface {
	// spec resolves the backend's own settings into the spec of a shared
	// connection, without its key: resolve adds the settings every
	// backend shares, then the key.
	spec() (connSpec, error)
	// unmarshalSetting parses the setting the dispenser is at, if it is
	// one of the daemon's; seen catches a setting given twice.
	unmarshalSetting(d *caddyfile.Dispenser, seen map[string]bool) (bool, error)
	// validateStatic checks what can be checked before placeholders are
	// replaced, so that `caddy adapt` already names a bad setting.
	validateStatic() error
	// readiness is the daemon's Readiness, which every backend embeds.
	readiness() *Readiness
}

// SettingError is an error about a setting, or about its combination with
// others, that names them: Setting is the one at fault, as the Caddyfile
// and the JSON spell it ("token", "tls ca"), and Also the others whose
// combination with it is at fault ("address" for a token refused with a
// unix socket address). Its text is "<setting>: <what is wrong>". A
// module's Provision and Caddyfile errors about a setting wrap one, so
//
//	var se *caddydicer.SettingError
//	if errors.As(err, &se) { ... se.Setting ... }
//
// finds the setting without reading the text. A bad selector is a
// *selector.SyntaxError instead, which names the selector.
type SettingError = setting.Error

// Readiness is the readiness probe's setting (R1a), the same for every
// daemon: a running instance without a health check joins its rotations
// once its port accepts a TCP connection, which Caddy tries a few
// milliseconds apart, off the request path, once per connection whatever
// the number of routes.
type Readiness struct {
	// ReadinessTimeout is how long a running instance without a health
	// check may take to accept a connection where requests would go
	// before it joins its rotations anyway, with a warning. Until then it
	// gets no requests. Example: `30s` for an app that starts slowly (or
	// give it a health check). Default: `5s`.
	ReadinessTimeout caddy.Duration `json:"readiness_timeout,omitempty"`
}

func (r *Readiness) readiness() *Readiness { return r }

// unmarshalSetting parses `readiness_timeout <duration>` if the dispenser
// is at it.
func (r *Readiness) unmarshalSetting(d *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	_, ok, err := settingAt(d, seen, "readiness_timeout")
	if !ok || err != nil {
		return ok, err
	}
	var raw string
	if err := oneValue(d, &raw); err != nil {
		return true, err
	}
	dur, err := caddy.ParseDuration(raw)
	if err != nil || dur <= 0 {
		return true, settingErrf(d, "readiness_timeout", "%q is not a positive duration (e.g. 5s)", raw)
	}
	r.ReadinessTimeout = caddy.Duration(dur)
	return true, nil
}

// validate checks a ReadinessTimeout given in JSON.
func (r *Readiness) validate() error {
	if r.ReadinessTimeout < 0 {
		return setting.Errorf("readiness_timeout", "%s is negative", time.Duration(r.ReadinessTimeout))
	}
	return nil
}

// unmarshalDaemonSetting parses one setting of daemon's, if the dispenser
// is at one.
func unmarshalDaemonSetting(d *caddyfile.Dispenser, daemon daemonSettings, seen map[string]bool) (bool, error) {
	if ok, err := daemon.readiness().unmarshalSetting(d, seen); ok || err != nil {
		return ok, err
	}
	return daemon.unmarshalSetting(d, seen)
}

// connSpec is what opens a shared connection: its key in the pool, the
// catalog's options and the adapter to run.
type connSpec struct {
	// key identifies the daemon and every setting that shapes the
	// connection; modules with equal keys share it. resolve sets it, and
	// only resolve.
	key string
	// kind and address name the daemon (see connection).
	kind, address string
	// identity are the backend's own settings that shape the connection
	// (its adapter's key, its limits), for the key.
	identity []string
	opts     catalog.Options
	run      func(ctx context.Context, sink catalog.Sink)
	// readinessTimeout is the ReadinessTimeout setting (0: the default).
	readinessTimeout time.Duration
	// scaling is how the daemon's instances wake and its pools grow
	// (connection.Scaling): Standby on Docker, WakeOnConnect on Dicer,
	// Replicas on Swarm.
	scaling connection.Scaling
	// standbyEngine names the Engine whose scale-to-zero state every
	// connection to it shares (R5f: "" shares none).
	standbyEngine string
}

// newConnSpec puts together what opens a shared connection to a backend's
// daemon at address; identity are the backend's own settings that shape
// the connection (see connSpec). The logger follows Caddy's current
// default logger; the adapter adds the address to its own lines, the
// catalog gets it here.
func newConnSpec(backend, address, publishedPortHost, daemonHost string, identity []string,
	run func(ctx context.Context, sink catalog.Sink, logger *zap.Logger),
) connSpec {
	logger := daemonLogger(backend)
	return connSpec{
		kind:     backend,
		address:  address,
		identity: identity,
		opts: catalog.Options{
			PublishedPortHost: publishedPortHost,
			DaemonHost:        daemonHost,
			Logger:            logger.With(zap.String("address", address)),
		},
		run: func(ctx context.Context, sink catalog.Sink) { run(ctx, sink, logger) },
	}
}

// resolve resolves daemon's settings, placeholders replaced and files
// read, into the spec of its shared connection, keyed.
func resolve(daemon daemonSettings) (connSpec, error) {
	r := daemon.readiness()
	if err := r.validate(); err != nil {
		return connSpec{}, err
	}
	spec, err := daemon.spec()
	if err != nil {
		return connSpec{}, err
	}
	spec.readinessTimeout = time.Duration(r.ReadinessTimeout)
	spec.key = spec.connKey()
	return spec, nil
}

// conn is what connection.New makes the connection of.
func (s *connSpec) conn() connection.Spec {
	return connection.Spec{Kind: s.kind, Address: s.address, Catalog: s.opts, Run: s.run,
		ReadinessTimeout: s.readinessTimeout, Scaling: s.scaling}
}

// connKey is the connection's key in the pool: every setting that shapes
// the connection, hashed since one may be a token.
func (s *connSpec) connKey() string {
	parts := append([]string{s.kind, s.address, s.opts.PublishedPortHost}, s.identity...)
	if s.readinessTimeout != 0 {
		parts = append(parts, "readiness_timeout="+s.readinessTimeout.String())
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])
}
