package caddydicer

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

func init() {
	caddy.RegisterModule(DockerUpstreams{})
	caddy.RegisterModule(DockerPermission{})
}

// DockerEngine is how a module reaches a Docker Engine. Every module that
// names the same Engine with the same settings shares one connection and
// one container catalog, which outlive config reloads. The plugin reads
// from the Engine, and writes to it only to start, stop, pause and unpause
// containers labelled `caddy.standby_after` (scale to zero).
type DockerEngine struct {
	// EngineConnection holds address and tls: where the Engine is reached.
	EngineConnection

	// PublishedPortHost is the host at which ports that containers publish
	// on every host address are reached, e.g. `10.0.0.5`. Default: the
	// Engine's host when Address is TCP and not loopback, else the gateway
	// address of the container's network.
	PublishedPortHost string `json:"published_port_host,omitempty"`

	// MaxWakes is how many containers labelled `caddy.standby_after` this
	// connection may be waking at once (scale to zero, R5d), from the
	// start or unpause call until the container is routable or the wake
	// failed. A request that needs one more wake is held until a wake
	// ends, within its route's wake_timeout. Example: `16` for a host
	// with cores to spare. Default: `4`.
	MaxWakes int `json:"max_wakes,omitempty"`

	// MaxHeld is how many requests this connection may hold while their
	// containers wake (R5d); one more is answered 503 with `Retry-After:
	// 5` at once. A held request costs a goroutine and a few KiB.
	// Example: `10000`. Default: `1000`.
	MaxHeld int `json:"max_held,omitempty"`

	// DependsOnScope is which containers a `caddy.depends_on` label may
	// name as dependencies, woken before it and kept up while it runs
	// (R5k): `project`, those of the container's own Compose project
	// (`com.docker.compose.project`) or Swarm stack
	// (`com.docker.stack.namespace`), and among containers with neither
	// label, only each other; `any`, every container of the Engine, for
	// an Engine whose labels one team controls. Default: `project`.
	DependsOnScope string `json:"depends_on_scope,omitempty"`

	// Readiness holds readiness_timeout, the readiness probe's bound.
	Readiness
}

// DockerUpstreams is a dynamic upstream source for reverse_proxy: the
// containers of a Docker Engine whose labels match the selector, or, without
// a selector, those whose `caddy.host` label lists the request's host. It
// follows the Engine's events, inspecting only the container an event is
// about; no request waits on the Engine and Caddy is never reloaded.
//
// Upstreams are the routable containers (running, with an address on the
// route's network, and healthy if they have a health check) in name order.
// With none, a container labelled `caddy.standby_after` that is stopped or
// paused is started (or unpaused) and the request waits for it, up to
// wake_timeout; otherwise none means 503.
type DockerUpstreams struct {
	DockerEngine
	upstreamSource

	// Network is the Docker network to reach containers on when they are
	// attached to several, e.g. `frontend`. Default: the container's
	// `caddy.network` label, else its only network; a container on several
	// networks with neither gets no requests, and one warning says so.
	Network string `json:"network,omitempty"`

	// WakeTimeout is how long a request waits for a container that it
	// wakes (scale to zero: a container labelled `caddy.standby_after`,
	// stopped or paused, when none of the route's containers is
	// routable). After that the request is answered 503 with a
	// Retry-After header, and the container keeps starting. Example:
	// `2m` for an app that starts slowly. Default: `30s`.
	WakeTimeout caddy.Duration `json:"wake_timeout,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (DockerUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.docker",
		New: func() caddy.Module { return new(DockerUpstreams) },
	}
}

// Provision connects to the Engine, or joins the shared connection.
func (u *DockerUpstreams) Provision(ctx caddy.Context) error {
	if u.WakeTimeout < 0 {
		return setting.Errorf("wake_timeout", "%s is negative", time.Duration(u.WakeTimeout))
	}
	u.wakeTimeout = time.Duration(u.WakeTimeout)
	if u.wakeTimeout == 0 {
		u.wakeTimeout = standby.DefaultWakeTimeout
	}
	return u.provision(ctx, &u.DockerEngine, u.Network)
}

// UnmarshalCaddyfile sets up the source from Caddyfile tokens, either
// the shorthand:
//
//	dynamic docker [<selector> [<port>]]
//
// or a block with any of the settings:
//
//	dynamic docker {
//		address <endpoint>
//		selector <selector>
//		port <port>
//		network <network>
//		wake_timeout <duration>
//		max_wakes <n>
//		max_held <n>
//		depends_on_scope project|any
//		published_port_host <host>
//		readiness_timeout <duration>
//		tls {
//			ca <file>
//			cert <file>
//			key <file>
//		}
//	}
//
// A selector with spaces is quoted: `dynamic docker "tier in (web,edge)" 8080`.
func (u *DockerUpstreams) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return u.unmarshal(d, "docker", &u.DockerEngine, func(d *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
		setting, ok, err := settingAt(d, seen, "network", "wake_timeout")
		if !ok || err != nil {
			return ok, err
		}
		if setting == "network" {
			return true, oneValue(d, &u.Network)
		}
		var raw string
		if err := oneValue(d, &raw); err != nil {
			return true, err
		}
		dur, err := caddy.ParseDuration(raw)
		if err != nil || dur <= 0 {
			return true, settingErrf(d, "wake_timeout", "%q is not a positive duration (e.g. 30s)", raw)
		}
		u.WakeTimeout = caddy.Duration(dur)
		return true, nil
	})
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
//		tls {
//			ca   <file>
//			cert <file>
//			key  <file>
//		}
//	}
func (p *DockerPermission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "docker", &p.DockerEngine)
}

// config is the adapter configuration and the published port host,
// placeholders replaced.
func (e *DockerEngine) config() (docker.Config, string) {
	return e.EngineConnection.config(), strings.TrimSpace(caddy.NewReplacer().ReplaceAll(e.PublishedPortHost, ""))
}

// spec resolves the settings (placeholders, TLS files) into what the
// Docker adapter runs with.
func (e *DockerEngine) spec() (connSpec, error) {
	cfg, pph := e.config()
	if err := follow.CheckPublishedPortHost(pph); err != nil {
		return connSpec{}, err
	}
	a, err := docker.New(cfg)
	if err != nil {
		return connSpec{}, err
	}
	if err := e.validateLimits(); err != nil {
		return connSpec{}, err
	}
	keyParts := []string{a.Key()}
	if e.MaxWakes != 0 || e.MaxHeld != 0 { // keys of connections with the defaults unchanged
		keyParts = append(keyParts, fmt.Sprintf("max_wakes=%d max_held=%d", e.MaxWakes, e.MaxHeld))
	}
	if e.DependsOnScope == dependsOnAny {
		keyParts = append(keyParts, "depends_on_scope=any")
	}
	spec := newConnSpec("docker", a.Address(), pph, docker.DaemonHost(a.Address()), keyParts, a.Loop().Run)
	spec.opts.DependsOnAnyScope = e.DependsOnScope == dependsOnAny
	spec.actions = dockerActions{a.Actions()}
	spec.standbyEngine = "docker\x00" + a.Key() // every connection to this Engine (R5f)
	spec.standbyOptions = standby.Options{MaxWakes: e.MaxWakes, MaxHeld: e.MaxHeld}
	return spec, nil
}

// validateLimits checks max_wakes, max_held and depends_on_scope given in
// JSON.
func (e *DockerEngine) validateLimits() error {
	if e.MaxWakes < 0 {
		return setting.Errorf("max_wakes", "%d is negative", e.MaxWakes)
	}
	if e.MaxHeld < 0 {
		return setting.Errorf("max_held", "%d is negative", e.MaxHeld)
	}
	switch e.DependsOnScope {
	case "", dependsOnProject, dependsOnAny:
	default:
		return setting.Errorf("depends_on_scope", "%q is neither %q nor %q", e.DependsOnScope, dependsOnProject, dependsOnAny)
	}
	return nil
}

// The values of depends_on_scope.
const (
	dependsOnProject = "project"
	dependsOnAny     = "any"
)

// validateStatic checks the settings that need no placeholder replacement,
// so that `caddy adapt` already names a bad one.
func (e *DockerEngine) validateStatic() error {
	if err := e.validateLimits(); err != nil {
		return err
	}
	if !strings.Contains(e.PublishedPortHost, "{") {
		if err := follow.CheckPublishedPortHost(strings.TrimSpace(e.PublishedPortHost)); err != nil {
			return err
		}
	}
	return e.EngineConnection.validateStatic()
}

// unmarshalSetting parses one Engine setting of a Caddyfile block, if the
// dispenser is at one; seen catches a setting given twice.
func (e *DockerEngine) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	if ok, err := e.EngineConnection.unmarshalSetting(disp, seen); ok || err != nil {
		return ok, err
	}
	name, ok, err := settingAt(disp, seen, "published_port_host", "max_wakes", "max_held", "depends_on_scope")
	if !ok || err != nil {
		return ok, err
	}
	switch name {
	case "depends_on_scope":
		if err := oneValue(disp, &e.DependsOnScope); err != nil {
			return true, err
		}
		if e.DependsOnScope != dependsOnProject && e.DependsOnScope != dependsOnAny {
			return true, settingErrf(disp, name, "%q is neither %q nor %q", e.DependsOnScope, dependsOnProject, dependsOnAny)
		}
		return true, nil
	case "max_wakes":
		return true, positiveInt(disp, name, &e.MaxWakes)
	case "max_held":
		return true, positiveInt(disp, name, &e.MaxHeld)
	default:
		return true, oneValue(disp, &e.PublishedPortHost)
	}
}

// positiveInt reads the one value of setting name, a positive integer.
func positiveInt(disp *caddyfile.Dispenser, name string, into *int) error {
	var raw string
	if err := oneValue(disp, &raw); err != nil {
		return err
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n <= 0 {
		return settingErrf(disp, name, "%q is not a positive integer (e.g. 4)", raw)
	}
	*into = n
	return nil
}

// dockerActions are the adapter's writes, as the connection uses them.
type dockerActions struct{ *docker.Actions }

func (dockerActions) Denied(err error) bool { return docker.Denied(err) }
func (dockerActions) Gone(err error) bool   { return docker.Gone(err) }
func (dockerActions) Unreachable(err error) bool {
	return docker.ConnectionFailed(err)
}

// Interface guards
var (
	_ daemonSettings  = (*DockerEngine)(nil)
	_ standby.Actions = dockerActions{}

	_ caddy.Provisioner           = (*DockerUpstreams)(nil)
	_ caddy.CleanerUpper          = (*DockerUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*DockerUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*DockerUpstreams)(nil)

	_ caddy.Provisioner           = (*DockerPermission)(nil)
	_ caddy.CleanerUpper          = (*DockerPermission)(nil)
	_ caddyfile.Unmarshaler       = (*DockerPermission)(nil)
	_ caddytls.OnDemandPermission = (*DockerPermission)(nil)
)
