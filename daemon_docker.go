package caddydicer

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/heal"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// DockerEngine is how a module reaches a Docker Engine. Every module that
// names the same Engine with the same settings shares one connection and
// one container catalog, which outlive config reloads. The plugin reads
// from the Engine, and writes to it only to start, stop, pause and unpause
// containers labelled `caddy.standby_after` (scale to zero), and to
// restart containers labelled `caddy.heal` (healing, R1e).
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

	// HealMaxRestarts is how many times in any hour Caddy may restart one
	// container labelled `caddy.heal` that stays unhealthy (R1e); past
	// it, one warning, and the container is left unhealthy until an hour
	// after the oldest of those restarts. Example: `3`. Default: `6`.
	HealMaxRestarts int `json:"heal_max_restarts,omitempty"`

	// Labels are the label sets containers are routed by (R2f):
	// `caddy-dicer` (caddy.host and the rest, always read),
	// `caddy-docker-proxy` (`caddy`, `caddy.reverse_proxy: {{upstreams
	// 8080}}`, handle_path...) and `traefik` (`traefik.http.routers.<r>.rule`
	// and the rest), each read as those proxies' own documentation writes
	// them. A container whose labels ask for what a dynamic source cannot
	// do (basic_auth, headers, middlewares, matchers...) is not routed at
	// all, with one warning naming the label. Under any sets, a container
	// carrying their protection labels (caddy.basic_auth, caddy.forward_auth,
	// a Traefik router's middlewares...) is not routed either, unless the
	// word `skip-foreign-protections` is there too: then it is routed by the
	// labels read, those protections skipped. Example: `labels caddy-dicer
	// caddy-docker-proxy traefik`. Default: `caddy-dicer`.
	Labels []string `json:"labels,omitempty"`

	// Follow is a label selector (R8's syntax) a container's own labels
	// must match for this connection to see it at all (R2g): one that does
	// not is not listed, its events are ignored, and so it is never routed,
	// allowed a certificate, woken, put on standby, healed, or counted as
	// a dependency. Two Caddys on one Engine that are not one fleet
	// (staging and production proxies) each follow their own containers.
	// Example: `follow env=prod`. Default: the `CADDY_DICER_FOLLOW`
	// environment variable when it is set and not empty, else every
	// container.
	Follow string `json:"follow,omitempty"`

	// Readiness holds readiness_timeout, the readiness probe's bound.
	Readiness
}

// config is the adapter configuration and the published port host,
// placeholders replaced.
func (e *DockerEngine) config() (docker.Config, string) {
	cfg := e.EngineConnection.config()
	cfg.Labels, _ = labelSets(e.Labels) // checked by validateLimits
	return cfg, strings.TrimSpace(caddy.NewReplacer().ReplaceAll(e.PublishedPortHost, ""))
}

// spec resolves the settings (placeholders, TLS files) into what the
// Docker adapter runs with.
func (e *DockerEngine) spec() (connSpec, error) {
	cfg, pph := e.config()
	if err := follow.CheckPublishedPortHost(pph); err != nil {
		return connSpec{}, err
	}
	sel, err := followSelector(e.Follow, os.Getenv) // the environment read at provision
	if err != nil {
		return connSpec{}, err
	}
	cfg.Follow = sel
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
	if e.HealMaxRestarts != 0 {
		keyParts = append(keyParts, fmt.Sprintf("heal_max_restarts=%d", e.HealMaxRestarts))
	}
	spec := newConnSpec("docker", a.Address(), pph, docker.DaemonHost(a.Address()), keyParts, a.Loop().Run)
	spec.opts.DependsOnAnyScope = e.DependsOnScope == dependsOnAny
	// Every connection to this Engine, whatever labels it reads (R5f) and
	// whichever containers it follows (R2g: each acts only on those in
	// its own catalog).
	spec.standbyEngine = "docker\x00" + a.EngineKey()
	spec.scaling = connection.Standby(dockerActions{a.Actions()}, standby.Options{MaxWakes: e.MaxWakes, MaxHeld: e.MaxHeld},
		dicerapp.SharedEngine(spec.standbyEngine)).Healing(e.HealMaxRestarts)
	return spec, nil
}

// validateLimits checks max_wakes, max_held, depends_on_scope, labels and
// follow given in JSON.
func (e *DockerEngine) validateLimits() error {
	if e.MaxWakes < 0 {
		return setting.Errorf("max_wakes", "%d is negative", e.MaxWakes)
	}
	if e.MaxHeld < 0 {
		return setting.Errorf("max_held", "%d is negative", e.MaxHeld)
	}
	if e.HealMaxRestarts < 0 {
		return setting.Errorf("heal_max_restarts", "%d is negative", e.HealMaxRestarts)
	}
	if _, err := labelSets(e.Labels); err != nil {
		return err
	}
	if _, err := followSelector(e.Follow, nil); err != nil { // the setting's own; the environment's at provision
		return err
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
	name, ok, err := settingAt(disp, seen, "published_port_host", "max_wakes", "max_held", "depends_on_scope", "heal_max_restarts", "labels", "follow")
	if !ok || err != nil {
		return ok, err
	}
	switch name {
	case "labels":
		return true, unmarshalLabels(disp, &e.Labels)
	case "follow":
		return true, unmarshalFollow(disp, &e.Follow)
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
	case "heal_max_restarts":
		return true, positiveInt(disp, name, &e.HealMaxRestarts)
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

func (dockerActions) Gone(err error) bool { return docker.Gone(err) }

func (dockerActions) Unreachable(err error) bool {
	return docker.ConnectionFailed(err)
}

// Interface guards
var (
	_ daemonSettings    = (*DockerEngine)(nil)
	_ standby.Actions   = dockerActions{}
	_ standby.CPUReader = dockerActions{}
	_ heal.Actions      = dockerActions{}
)
