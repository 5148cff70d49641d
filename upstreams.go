package caddydicer

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/pick"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// upstreamSource is what an upstream source does whatever its daemon: the
// route's settings, and the answer to GetUpstreams from the shared catalog.
type upstreamSource struct {
	// Selector chooses the instances by label, Kubernetes style; a comma
	// means AND: `app=web,tier!=canary`, `tier in (frontend,edge)`,
	// `public`, `!internal`. An instance with a `caddy.host` label still
	// gets requests only for the hosts it lists. Default: none, routing by
	// the `caddy.host` label alone.
	Selector string `json:"selector,omitempty"`

	// Port is the guest port requests go to, unless an instance's
	// `caddy.port` label names another. Default: the only TCP port the
	// instance publishes; an instance with none or several gets no
	// requests. Example: `8080`.
	Port int `json:"port,omitempty"`

	// StripPathPrefix removes, from the request reverse_proxy sends, the
	// `caddy.path` prefix that routed it (R2d): `/admin/x` to an instance
	// labelled `caddy.path=/admin` arrives as `/x`. An instance's
	// `caddy.strip_path` label (`true` or `false`) overrides it for the
	// requests sent to it. It is the very last
	// change to the request, made on reverse_proxy's own copy as its
	// upstream is chosen, so every matcher and handler of the site
	// (`basic_auth /admin/*`, `forward_auth`, `remote_ip`) sees the path
	// the client sent. Default: false, the path as the client sent it.
	// Caddyfile: `strip_path_prefix` (no value).
	StripPathPrefix bool `json:"strip_path_prefix,omitempty"`

	// PageSettings holds wake_page_after and page_template (R5h, R5i,
	// upstreams_pages.go).
	PageSettings

	// QueueSettings holds max_requests, queue_size and queue_timeout
	// (R5q, upstreams_queue.go).
	QueueSettings

	logger *zap.Logger
	key    string
	conn   *connection.Conn
	view   *catalog.View
	route  catalog.Route
	// group is the members of the `dynamic multi` that holds the source,
	// if one does (see upstreams_multi.go); inGroup says s is one of them.
	group   *sourceGroup
	inGroup bool
	// wakeTimeout bounds how long a request waits for an instance that
	// it wakes (Docker scale to zero).
	wakeTimeout time.Duration
	// noUpstream and wakes count requests that found no upstream and
	// those sent to an instance on standby (R5), resolved at provision:
	// a request only adds to them.
	noUpstream prometheus.Counter
	wakes      prometheus.Counter
	// keepAlive closes the idle connections of the handler's transport
	// (R5a, upstreams_idleconns.go).
	keepAlive *keepAlive
	// readsPicks is set when the route's selection policy reads the
	// weights and identities of the upstreams (R4c, R4d, package pick).
	readsPicks bool
	// observed labels the series of the instances it sends requests to
	// (R13b, upstreams_metrics.go); countsInstances says whether its
	// requests are counted there: when Caddy's own HTTP metrics are on
	// (the `metrics` global option, or a server's), as Caddy counts its
	// own per request only then.
	observed        sourceObserved
	countsInstances bool
	// rollout watches the route's rollouts (R4f, upstreams_rollout.go),
	// nil for a route without a selector; its requests are counted while
	// one is under way (rollout.counting).
	rollout *routeRollout
}

// provision joins the daemon's shared connection and, for a selector,
// its view in the catalog.
func (s *upstreamSource) provision(ctx caddy.Context, daemon daemonSettings, network string) error {
	sel, err := parseRoute(s.Selector, s.Port)
	if err != nil {
		return err
	}
	if err := s.provisionPages(); err != nil {
		return err
	}
	s.logger = ctx.Logger()
	if s.conn, s.key, err = open(daemon); err != nil {
		return err
	}
	s.conn.ShareThrough(fleetStorage(ctx.Storage()), fleetSelf()) // one idle clock and the switches across a fleet (R5m, R4e)
	s.conn.Catalog().AddRoutePort(s.Port)                         // probed for readiness (R1a)
	s.route = catalog.Route{Port: s.Port, Network: network}
	if !sel.Empty() {
		s.view = s.conn.Catalog().Watch(sel)
		s.route.View = s.view
	}
	dicerapp.RegisterMetrics(ctx, append(queueCollectors(), instanceSeries)...)
	name := routeName(sel, s.Port, network)
	if err := s.provisionQueue(s.conn.Kind(), s.conn.Address(), name); err != nil {
		return err
	}
	s.noUpstream = s.conn.NoUpstream(name)
	s.wakes = s.conn.Wakes(connection.WakeRequested)
	if err := await(ctx, s.conn); err != nil {
		return err
	}
	if err := s.joinGroup(ctx); err != nil {
		return err
	}
	s.keepAlive = &keepAlive{handler: handlerOf(ctx)}
	s.readsPicks = pick.HandlerReads(s.keepAlive.handler)
	s.observed = sourceObserved{conn: s.conn, route: name}
	s.countsInstances = httpMetricsOn(ctx)
	s.startRollouts(sel, name) // R4f
	s.conn.AddRoute(s, name)   // last: the admin API reads s.group
	ctx.Logger().Debug("upstream source ready", zap.String("selector", sel.String()),
		zap.Int("port", s.Port), zap.String("network", network))
	return nil
}

// GetUpstreams returns where the request may go: fresh values on every
// call, since reverse_proxy writes into them. It costs one atomic load, the
// route's precomputed candidates, and an allocation per upstream plus two;
// an instance labelled caddy.standby_after adds an atomic store, one
// labelled caddy.soft_limit atomic loads (R5j, connection.Conn.Grow). Only a
// request that finds nothing routable and an instance to wake waits (see
// wake), or one that finds every routable instance at its limit of
// requests in flight (R5q: caddy.max_requests, see admit), which costs
// a route under a limit a lock per request. As a source of a `dynamic
// multi`, it answers with the multi's other sources of this plugin (R5b, upstreams_multi.go): an index lookup
// in each of their catalogs for a host its own daemon does not list, and
// their picks when it has no routable instance.
func (s *upstreamSource) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	var buf [8]catalog.Target
	var targets []catalog.Target
	deferred := false // to another source of the multi
	pick := catalog.PickedNone
	snap, host := s.conn.Catalog().Snapshot(), catalog.NormalizeHost(r.Host)
	route := s.routeFor(r, snap)            // R2d
	s.stripPathPrefix(r, snap, route, host) // R2d, upstreams_paths.go: routed by the client's path, sent without its prefix if its instances say so
	s.keepAlive.resolve()
	if s.group == nil {
		targets, pick = snap.Pick(buf[:0], route, host, false)
	} else {
		targets, pick, deferred = s.group.targets(s, snap, buf[:0], host, requestPath(r))
	}
	if len(targets) == 0 {
		if deferred {
			return nil, nil
		}
		if ups := s.maintenancePage(r, snap, host); ups != nil { // R5i
			return ups, nil
		}
		if s.group == nil {
			if ups := s.asleepAnswer(r, snap, route, host); ups != nil { // R5r, upstreams_activity.go: ignored, not woken
				return ups, nil
			}
		}
		ups, err := s.wake(r, route, host, buf[:0])
		if len(ups) == 0 && err == nil && s.group == nil {
			ups = s.removedPage(r, route, host) // R5o
		}
		if len(ups) == 0 && s.noUpstream != nil { // nil: not provisioned (unit tests)
			s.noUpstream.Inc()
		}
		return ups, err
	}
	limited := false
	if pick == catalog.PickedRoutable && s.group == nil {
		var refused []*reverseproxy.Upstream
		if snap, targets, refused = s.admit(r, snap, route, host, targets); refused != nil || len(targets) == 0 { // R5q, upstreams_queue.go
			return refused, nil
		}
		limited = catalog.Capacity(targets, s.MaxRequests) > 0
		s.conn.Grow(snap, s.route, host, targets) // R5j: atomics unless every target is past its soft limit
	}
	if pick == catalog.PickedStandby {
		if s.group == nil && targets[0].Ignore != nil && ignoredBy(r, targets[0].Ignore) { // R5r: a connection would wake it
			if ups := s.asleepAnswer(r, snap, route, host); ups != nil {
				return ups, nil
			}
		}
		if s.wakes != nil && s.group == nil { // as before: a multi's member counts none
			s.wakes.Inc() // the connection wakes it (R5)
		}
		s.keepAlive.closeIdle() // none from before its freeze is reused (R5a, upstreams_idleconns.go)
	}
	ups := s.upstreams(r, snap, host, targets)
	if limited {
		s.limitUpstreams(r, ups, targets) // R5q
	}
	return ups, nil
}

// upstreams turns targets, from snap for host, into fresh upstreams,
// recording the use of those labelled caddy.standby_after (scale to zero)
// and, for the placeholders and metrics of who served the request, what
// it returned (R13a, R13b, upstreams_identity.go). Under one of our
// selection policies, which read more of each instance, they are
// pick.Upstreams (R4c, R4d, package pick).
func (s *upstreamSource) upstreams(r *http.Request, snap *catalog.Snapshot, host string, targets []catalog.Target) []*reverseproxy.Upstream {
	sv := s.record(r)
	n := len(targets)
	var block []reverseproxy.Upstream
	var picked []pick.Upstream
	ups, names := []*reverseproxy.Upstream(nil), []string(nil)
	switch {
	case s.readsPicks:
		picked, ups = make([]pick.Upstream, n), make([]*reverseproxy.Upstream, n)
	default:
		block, ups, names = sv.buffers(n)
		if block == nil {
			block, ups = make([]reverseproxy.Upstream, n), make([]*reverseproxy.Upstream, n)
		}
	}
	if names == nil && sv != nil {
		names = make([]string, n)
	}
	for i, t := range targets {
		var u *reverseproxy.Upstream
		if picked != nil {
			picked[i].Name, picked[i].Weight, picked[i].Identity = t.Instance, t.Weight, t.Identity
			u = &picked[i].Upstream
		} else {
			u = &block[i]
		}
		u.Dial, ups[i] = t.Dial, u
		if names != nil {
			names[i] = t.Instance
		}
		if t.Activity != nil && (t.Ignore == nil || !ignoredBy(r, t.Ignore)) { // R5r: an ignored request is no use
			recordUse(s.conn, r, t.Activity, u) // scale to zero, R5j (upstreams_standby.go)
		}
	}
	if sv != nil {
		sv.observe(s, snap, host, ups, names)
	}
	if picked != nil {
		pick.Record(r, picked)
	}
	return ups
}

// wake is GetUpstreams for a route with nothing routable: on a daemon
// that Caddy wakes instances of (Docker), it wakes one and holds the
// request until it is ready, at most wakeTimeout; then, or when the
// instance cannot be woken, the one upstream answers 503 with
// Retry-After. Nothing to wake: no upstreams, which Caddy answers 503.
func (s *upstreamSource) wake(r *http.Request, route catalog.Route, host string, buf []catalog.Target) ([]*reverseproxy.Upstream, error) {
	if !s.conn.WakesOnRequest() {
		return nil, nil
	}
	hold, page := s.holdFor(r) // R5h
	// Held under the client's share of max_held (upstreams_standby.go).
	targets, retry := s.conn.Hold(holdContext(r), route, host, hold, buf)
	if len(targets) == 0 {
		if retry == 0 {
			return nil, nil
		}
		if page && r.Context().Err() == nil {
			if u := s.wakePage(r, host, retry); u != nil {
				return []*reverseproxy.Upstream{u}, nil
			}
		}
		if u := standInUpstream(s.conn, retry); u != nil {
			return []*reverseproxy.Upstream{u}, nil
		}
		return nil, nil
	}
	return s.upstreams(r, s.conn.Catalog().Snapshot(), host, targets), nil
}

// Cleanup releases the view and the shared connection, and leaves the
// multi's group.
func (s *upstreamSource) Cleanup() error {
	s.cleanupPages()
	if s.key != "" {
		s.conn.RemoveRoute(s) // first: the admin API reads the route
	}
	s.leaveGroup()
	s.stopRollouts()
	if s.view != nil {
		s.conn.Catalog().Unwatch(s.view)
		s.view = nil
	}
	if s.key != "" {
		s.conn.Catalog().RemoveRoutePort(s.Port)
	}
	dicerapp.Release(s.key)
	s.key = ""
	return nil
}

// unmarshal parses `<name> [<selector> [<port>]]` or `<name> { ... }`: the
// route's settings, the daemon's, and those extra takes (nil: none). Each
// error names the line of the setting at fault.
func (s *upstreamSource) unmarshal(d *caddyfile.Dispenser, name string, daemon daemonSettings, extra func(*caddyfile.Dispenser, map[string]bool) (bool, error)) error {
	d.Next() // module name
	seen := map[string]bool{}
	shorthand := d.RemainingArgs()
	if len(shorthand) > 0 {
		if sel := spacedSelector(shorthand, true); sel != "" {
			return settingErrf(d, "selector", "quote a selector that has spaces: %q", sel)
		}
		if len(shorthand) > 2 {
			return d.ArgErr()
		}
		if err := s.setSelector(d, shorthand[0]); err != nil {
			return err
		}
		seen["selector"] = true
		if len(shorthand) == 2 {
			if err := s.setPort(d, shorthand[1]); err != nil {
				return err
			}
			seen["port"] = true
		}
	}
	for d.NextBlock(0) {
		if d.Val() == "strip_path_prefix" { // R2d
			if seen["strip_path_prefix"] || d.NextArg() {
				return settingErrf(d, "strip_path_prefix", "takes no value, and is given once")
			}
			seen["strip_path_prefix"], s.StripPathPrefix = true, true
			continue
		}
		ok, err := s.unmarshalPageSetting(d, seen) // R5h, R5i
		if !ok && err == nil {
			ok, err = s.unmarshalQueueSetting(d, seen) // R5q
		}
		if !ok && err == nil {
			ok, err = unmarshalDaemonSetting(d, daemon, seen)
		}
		if !ok && extra != nil {
			ok, err = extra(d, seen)
		}
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		setting, ok, err := settingAt(d, seen, "selector", "port")
		inShorthand := setting == "selector" && len(shorthand) > 0 || setting == "port" && len(shorthand) == 2
		if err != nil && inShorthand {
			return d.Errf("%s has already been specified, in the shorthand `%s %s`: give the shorthand or the block, not both",
				setting, name, strings.Join(shorthand, " "))
		}
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized %s setting '%s'", name, d.Val())
		}
		args := d.RemainingArgs()
		if sel := spacedSelector(args, false); setting == "selector" && sel != "" {
			return settingErrf(d, "selector", "quote a selector that has spaces: %q", sel)
		}
		if len(args) != 1 {
			return d.ArgErr()
		}
		if setting == "selector" {
			err = s.setSelector(d, args[0])
		} else {
			err = s.setPort(d, args[0])
		}
		if err != nil {
			return err
		}
	}
	if err := daemon.validateStatic(); err != nil {
		return blame(d, err)
	}
	return nil
}

func (s *upstreamSource) setSelector(d *caddyfile.Dispenser, value string) error {
	if _, err := selector.Parse(value); err != nil {
		return d.WrapErr(err) // a SyntaxError names the selector
	}
	s.Selector = value
	return nil
}

func (s *upstreamSource) setPort(d *caddyfile.Dispenser, value string) error {
	port, err := strconv.Atoi(value)
	if err != nil || port < 1 || port > 65535 {
		return settingErrf(d, "port", "%q is not a port number (1-65535)", value)
	}
	s.Port = port
	return nil
}

// spacedSelector returns the selector that args, the words after a module
// name or a selector setting, spell when they were meant as one selector
// with spaces left unquoted, such as `app in (a,b) 8080`; else "". With
// port, a last word that is a number is the port.
func spacedSelector(args []string, port bool) string {
	if len(args) == 0 {
		return ""
	}
	words := args
	if _, err := strconv.Atoi(args[len(args)-1]); port && err == nil && len(args) > 1 {
		words = args[:len(args)-1]
	}
	if len(words) < 2 {
		return ""
	}
	joined := strings.Join(words, " ")
	if _, err := selector.Parse(joined); err != nil {
		return ""
	}
	return joined
}

// routeName names a route in metrics and the admin API: its selector, or
// `caddy.host` for a route by that label, and its port and network
// settings. One per configured route, so a metric label stays bounded.
func routeName(sel selector.Selector, port int, network string) string {
	name := "caddy.host"
	if !sel.Empty() {
		name = sel.String()
	}
	if port > 0 {
		name += " port " + strconv.Itoa(port)
	}
	if network != "" {
		name += " network " + network
	}
	return name
}

// parseRoute checks a route's selector and port settings.
func parseRoute(sel string, port int) (selector.Selector, error) {
	if port < 0 || port > 65535 {
		return selector.Selector{}, setting.Errorf("port", "%d is not a port number (1-65535)", port)
	}
	return selector.Parse(sel) // a SyntaxError names the selector
}

// FollowsDaemon marks an upstream source that follows one daemon: every
// list of backends the plugin shows reads them by it from Caddy's module
// registry (adminapi.Backends).
func (*upstreamSource) FollowsDaemon() {}
