package caddydicer

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

func init() {
	caddy.RegisterModule(DockerUpstreams{})
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
//		max_requests <n>
//		queue_size <n>
//		queue_timeout <duration>
//		network <network>
//		wake_timeout <duration>
//		max_wakes <n>
//		max_held <n>
//		heal_max_restarts <n>
//		depends_on_scope project|any
//		published_port_host <host>
//		readiness_timeout <duration>
//		labels caddy-dicer|caddy-docker-proxy|traefik|skip-foreign-protections...
//		follow <selector>
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

// Interface guards
var (
	_ caddy.Provisioner           = (*DockerUpstreams)(nil)
	_ caddy.CleanerUpper          = (*DockerUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*DockerUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*DockerUpstreams)(nil)
)
