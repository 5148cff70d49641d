// Package caddydicer provides Caddy modules that route to the instances a
// machine daemon runs, chosen by their labels, following the daemon's
// events so that no Caddyfile change or reload is needed as instances come
// and go.
package caddydicer

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

func init() {
	caddy.RegisterModule(DicerUpstreams{})
	caddy.RegisterModule(DicerPermission{})
}

// DicerUpstreams is a dynamic upstream source for reverse_proxy: the
// instances of a Dicer daemon whose labels match the selector, or, without a
// selector, those whose `caddy.host` label lists the request's host. Each
// request is answered from an in-memory catalog that the daemon's events
// keep current; the daemon is never asked during a request.
//
// Upstreams are the routable instances (running, with an address, and
// healthy if they have a health check) in instance-name order. When none is,
// one instance that a connection wakes from standby is returned, if any;
// otherwise none, which reverse_proxy answers with 503.
type DicerUpstreams struct {
	Daemon

	// Selector chooses the instances by label, Kubernetes style; a comma
	// means AND: `app=web,tier!=canary`, `tier in (frontend,edge)`,
	// `public`, `!internal`. An instance with a `caddy.host` label still
	// gets requests only for the hosts it lists. Default: none, routing by
	// the `caddy.host` label alone.
	Selector string `json:"selector,omitempty"`

	// Port is the guest port requests go to, unless an instance's
	// `caddy.port` label names another. Default: the only TCP port the
	// instance publishes; an instance with none or several gets no
	// requests.
	Port int `json:"port,omitempty"`

	key   string
	conn  *connection
	view  *catalog.View
	route catalog.Route
}

// CaddyModule returns the Caddy module information.
func (DicerUpstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.dicer",
		New: func() caddy.Module { return new(DicerUpstreams) },
	}
}

// Provision connects to the daemon, or joins the shared connection.
func (u *DicerUpstreams) Provision(ctx caddy.Context) error {
	sel, err := parseRoute(u.Selector, u.Port)
	if err != nil {
		return err
	}
	f, err := u.Daemon.follower()
	if err != nil {
		return fmt.Errorf("dicer: %w", err)
	}
	u.conn, err = dial(ctx, f)
	if err != nil {
		return fmt.Errorf("dicer: %w", err)
	}
	u.key = f.key
	u.route.Port = u.Port
	if !sel.Empty() {
		u.view = u.conn.catalog.Watch(sel)
		u.route.View = u.view
	}
	ctx.Logger().Debug("dicer upstreams ready", zap.String("selector", sel.String()), zap.Int("port", u.Port))
	return nil
}

// GetUpstreams returns where the request may go: fresh values on every
// call, since reverse_proxy writes into them.
func (u *DicerUpstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	return upstreamsFor(u.conn, u.route, r), nil
}

// Cleanup releases the view and the shared connection.
func (u *DicerUpstreams) Cleanup() error {
	if u.view != nil {
		u.conn.catalog.Unwatch(u.view)
	}
	release(u.key)
	return nil
}

// UnmarshalCaddyfile sets up the source from Caddyfile tokens:
//
//	dynamic dicer [<selector> [<port>]] {
//		address             <target>
//		token               <token>
//		selector            <selector>
//		port                <port>
//		published_port_host <host>
//		tls {
//			ca          <file>
//			server_name <name>
//		}
//	}
//
// A selector with spaces is quoted: `dynamic dicer "tier in (web,edge)" 8080`.
func (u *DicerUpstreams) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	seen := map[string]bool{}
	if d.NextArg() {
		u.Selector = d.Val()
		seen["selector"] = true
		if d.NextArg() {
			if err := u.setPort(d); err != nil {
				return err
			}
			seen["port"] = true
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for d.NextBlock(0) {
		if ok, err := u.Daemon.unmarshalSetting(d, seen); ok {
			if err != nil {
				return err
			}
			continue
		}
		name := d.Val()
		switch name {
		case "selector", "port":
		default:
			return d.Errf("unrecognized dicer setting '%s'", name)
		}
		if seen[name] {
			return d.Errf("%s has already been specified", name)
		}
		seen[name] = true
		if !d.NextArg() {
			return d.ArgErr()
		}
		if name == "selector" {
			u.Selector = d.Val()
		} else if err := u.setPort(d); err != nil {
			return err
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	if _, err := selector.Parse(u.Selector); err != nil {
		return d.Errf("%v", err) // a SyntaxError names the selector
	}
	if err := u.Daemon.validateStatic(); err != nil {
		return d.Errf("%v", err)
	}
	return nil
}

func (u *DicerUpstreams) setPort(d *caddyfile.Dispenser) error {
	port, err := strconv.Atoi(d.Val())
	if err != nil || port < 1 || port > 65535 {
		return d.Errf("port: %q is not a port number (1-65535)", d.Val())
	}
	u.Port = port
	return nil
}

// parseRoute checks a route's selector and port settings.
func parseRoute(sel string, port int) (selector.Selector, error) {
	if port < 0 || port > 65535 {
		return selector.Selector{}, fmt.Errorf("dicer: port: %d is not a port number (1-65535)", port)
	}
	s, err := selector.Parse(sel)
	if err != nil {
		return s, fmt.Errorf("dicer: %w", err) // a SyntaxError names the selector
	}
	return s, nil
}

// upstreamsFor answers GetUpstreams from the connection's current snapshot:
// one atomic load, the route's precomputed candidates, and two allocations.
func upstreamsFor(conn *connection, route catalog.Route, r *http.Request) []*reverseproxy.Upstream {
	var buf [8]catalog.Target
	targets := conn.catalog.Snapshot().Targets(buf[:0], route, catalog.NormalizeHost(r.Host))
	if len(targets) == 0 {
		return nil
	}
	block := make([]reverseproxy.Upstream, len(targets))
	ups := make([]*reverseproxy.Upstream, len(targets))
	for i, t := range targets {
		block[i].Dial = t.Dial
		ups[i] = &block[i]
	}
	return ups
}

// Interface guards
var (
	_ caddy.Provisioner           = (*DicerUpstreams)(nil)
	_ caddy.CleanerUpper          = (*DicerUpstreams)(nil)
	_ caddyfile.Unmarshaler       = (*DicerUpstreams)(nil)
	_ reverseproxy.UpstreamSource = (*DicerUpstreams)(nil)
)
