// Package prewake holds the plugin's Caddy listener wrappers
// (caddy.listeners): dicer_prewake, which starts the wake of an instance
// on standby at the TLS ClientHello that names its host (R5n).
package prewake

import (
	"net"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

func init() {
	caddy.RegisterModule(PreWake{})
}

// Defaults of PreWake's settings.
const (
	defaultClientWakes  = 4
	defaultClientWindow = time.Minute
)

// PreWake is the listener wrapper `dicer_prewake` (R5n): it reads the
// server name of each TLS ClientHello as the handshake reads it, and when
// the name is a host whose route would wake an instance on standby (the
// rules a request follows: R2 hosts, R5's choice, max_wakes, backoff,
// maintenance, depends_on), the wake starts then, a round trip and more
// before the request arrives; the request finds it under way and is held
// as usual. It takes no byte from the handshake, holds nothing, and
// touches no idle clock: a ClientHello is not use, so an instance woken by
// one that no request reaches goes back on standby once its standby_after
// has passed.
//
// Opt-in per server, before `tls` in the server's listener wrappers (a
// wrapper after `tls` sees only decrypted bytes):
//
//	{
//		servers :443 {
//			listener_wrappers {
//				dicer_prewake
//				tls
//			}
//		}
//	}
//
// The trade-off: anyone can send a ClientHello, for free, without ever
// completing a handshake. A pre-wake costs the container a start and
// standby_after of running. So each client address (an IPv6 client: its
// /64) starts at most client_wakes pre-wakes per client_window, and
// pre-wakes take at most half of a connection's max_wakes (rounded up),
// so that requests always have wake slots of their own. HTTP/3 (QUIC,
// over UDP) passes no listener wrapper: its requests wake as they always
// do, on arrival. Docker only: a Dicer instance wakes when a connection
// reaches its port, a Swarm service is never on standby.
type PreWake struct {
	// ClientWakes is how many pre-wakes one client address may start per
	// client_window. Default: 4. Caddyfile: `client_wakes 4`.
	ClientWakes int `json:"client_wakes,omitempty"`
	// ClientWindow is the window client_wakes counts over. Default: 1m.
	// Caddyfile: `client_window 1m`.
	ClientWindow caddy.Duration `json:"client_window,omitempty"`

	logger  *zap.Logger
	clients *clients.Budget
}

// CaddyModule returns the Caddy module information.
func (PreWake) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.listeners.dicer_prewake",
		New: func() caddy.Module { return new(PreWake) },
	}
}

// Provision sets the defaults and registers the metric.
func (p *PreWake) Provision(ctx caddy.Context) error {
	if p.ClientWakes < 0 {
		return setting.Errorf("client_wakes", "%d: must be 0 (the default, 4) or more", p.ClientWakes)
	}
	if p.ClientWindow < 0 {
		return setting.Errorf("client_window", "%s: must be positive", time.Duration(p.ClientWindow))
	}
	if p.ClientWakes == 0 {
		p.ClientWakes = defaultClientWakes
	}
	if p.ClientWindow == 0 {
		p.ClientWindow = caddy.Duration(defaultClientWindow)
	}
	p.logger = ctx.Logger()
	p.clients = clients.NewBudget(p.ClientWakes, time.Duration(p.ClientWindow))
	dicerapp.RegisterMetrics(ctx, hellos)
	return nil
}

// WrapListener wraps ln: each connection it accepts is read for a
// ClientHello as it passes.
func (p *PreWake) WrapListener(ln net.Listener) net.Listener {
	return &listener{Listener: ln, prewake: p}
}

// hello is called once per connection with the ClientHello's server name
// ("" for none, or not TLS) and the client's address.
func (p *PreWake) hello(name string, remote net.Addr) {
	if name == "" {
		hellos.WithLabelValues("no_name").Inc()
		return
	}
	client, ok := clients.Of(remote)
	if !ok {
		return
	}
	host := catalog.NormalizeHost(name)
	if !p.clients.Allows(client) {
		hellos.WithLabelValues("client_budget").Inc()
		return
	}
	result := standby.PreWakeNothing
	for _, c := range dicerapp.Connections() {
		if got := c.PreWake(host); got > result {
			result = got
		}
		if result == standby.PreWakeStarted || result == standby.PreWakeUnderWay {
			break
		}
	}
	if result == standby.PreWakeStarted {
		p.clients.Spend(client)
		p.logger.Debug("pre-wake at the ClientHello", zap.String("host", host), zap.String("client", client.String()))
	}
	hellos.WithLabelValues(resultLabel[result]).Inc()
}

var resultLabel = map[standby.PreWakeResult]string{
	standby.PreWakeNothing:  "nothing",
	standby.PreWakeUnderWay: "under_way",
	standby.PreWakeStarted:  "started",
	standby.PreWakeDeferred: "deferred",
}

// hellos counts the ClientHellos a dicer_prewake read, by what came of
// them.
var hellos = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy", Subsystem: "dicer", Name: "prewake_hellos_total",
	Help: "TLS ClientHellos read by dicer_prewake (R5n), by result: started (a wake began), under_way (its wake was), " +
		"nothing (no instance on standby for the name), deferred (the pre-wakes' share of max_wakes was taken, or the " +
		"instance backs off from a failed wake), client_budget (the client address started client_wakes already), " +
		"no_name (no server name, or not TLS).",
}, []string{"result"})

// UnmarshalCaddyfile sets up the wrapper from Caddyfile tokens:
//
//	dicer_prewake {
//		client_wakes  4
//		client_window 1m
//	}
func (p *PreWake) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the wrapper's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		var value string
		if !d.Args(&value) || d.NextArg() {
			return d.ArgErr()
		}
		switch name {
		case "client_wakes":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return d.WrapErr(setting.Errorf(name, "%q: must be a whole number, 1 or more", value))
			}
			p.ClientWakes = n
		case "client_window":
			dur, err := caddy.ParseDuration(value)
			if err != nil || dur <= 0 {
				return d.WrapErr(setting.Errorf(name, "%q: must be a positive duration, e.g. 1m", value))
			}
			p.ClientWindow = caddy.Duration(dur)
		default:
			return d.Errf("dicer_prewake: unknown setting %q (known: client_wakes, client_window)", name)
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Module          = (*PreWake)(nil)
	_ caddy.Provisioner     = (*PreWake)(nil)
	_ caddy.ListenerWrapper = (*PreWake)(nil)
	_ caddyfile.Unmarshaler = (*PreWake)(nil)
)
