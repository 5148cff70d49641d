package docker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// engine is the part of the Engine API the adapter uses; *client.Client
// implements it. Tests wrap it to count calls.
type engine interface {
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	// ContainerListHealth lists at API HealthListAPI, each container with
	// its health: only for an Engine that serves it (HealthInList).
	ContainerListHealth(ctx context.Context, options container.ListOptions) ([]Listed, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ServerVersion(ctx context.Context) (types.Version, error)
	// Rootless asks /info whether the daemon runs rootless (R11r).
	Rootless(ctx context.Context) (bool, error)
	ClientVersion() string
	Close() error
}

// containerActions are the container events that can change what the
// adapter reports of a container (R11). exec_*, attach, top, resize and the
// like cannot, and a health check runs an exec at every interval, so the
// Engine is asked to leave them out. kill is asked for because `docker
// stop` starts with it: the container leaves its rotations at the signal,
// not seconds later when it dies.
var containerActions = []events.Action{
	events.ActionCreate, events.ActionStart, events.ActionRestart,
	events.ActionKill, events.ActionStop, events.ActionDie, events.ActionPause,
	events.ActionUnPause, events.ActionRename, events.ActionDestroy,
	events.ActionHealthStatus, // a prefix: "health_status: healthy"
	// Podman's compatible API (R11p) filters on its own event names: its
	// "died" is sent as "die" but only an "event=died" filter lets it
	// through, and a removal is "remove", never "destroy".
	actionDied, actionRemove,
}

// Podman's container events (R11p) that the Engine does not send.
const (
	actionDied   events.Action = "died"
	actionRemove events.Action = "remove"
)

// stopSignals are the kill signals that end a container (the Engine's
// event gives the number): SIGINT, SIGQUIT, SIGKILL and SIGTERM, the
// default stop signal. Others (SIGHUP to reload, SIGUSR1, ...) change
// nothing that is reported.
var stopSignals = []string{"2", "3", "9", "15", "SIGINT", "SIGQUIT", "SIGKILL", "SIGTERM", "INT", "QUIT", "KILL", "TERM"}

// eventFilters asks for the container events above and for network
// connect/disconnect, which name the container in Actor.Attributes. (The
// Engine ORs the values of one key and ANDs the keys; "create" also lets
// network creations through, which are ignored.)
func eventFilters() filters.Args {
	f := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("type", string(events.NetworkEventType)),
		filters.Arg("event", string(events.ActionConnect)),
		filters.Arg("event", string(events.ActionDisconnect)),
	)
	AddContainerActions(f)
	return f
}

// AddContainerActions adds to f the container events ContainerEvent uses.
func AddContainerActions(f filters.Args) {
	for _, a := range containerActions {
		f.Add("event", string(a))
	}
}

// Adapter follows one Docker Engine, read-only. New makes it from a
// Config, which it checks, and whose TLS files it reads, once.
type Adapter struct {
	host string
	tls  *tls.Config // nil: no TLS
	pace follow.Pace
	// stopMargin is added to a container's stop timeout to bound a
	// stop signal's hold (follow.StopBound); zero: DefaultStopMargin.
	stopMargin time.Duration
	// resync, resyncTimeout and stallGrace are the Loop's (see Config).
	resync, resyncTimeout, stallGrace time.Duration
	key                               string
	// engineKey is key without the settings that shape only what is
	// read of the Engine (labels): equal ones are one Engine.
	engineKey string
	// labels are the label sets read (Config.Labels).
	labels foreignlabels.Set
	// follow is the selector of the containers seen (Config.Follow, R2g).
	follow selector.Selector
	// wrap, if set, wraps each session's Engine client (tests count calls).
	wrap func(engine) engine
}

// New resolves and checks cfg and reads its TLS files. Each error names
// the setting at fault: "address: ...", "tls: ...", "tls ca: ...", "tls
// cert: ...", "tls key: ...".
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.Resolved()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	tlsCfg, material, err := cfg.loadTLS()
	if err != nil {
		return nil, err
	}
	a := &Adapter{host: cfg.Host, tls: tlsCfg, pace: cfg.Pace, resyncTimeout: cfg.ResyncTimeout, stallGrace: cfg.StallGrace, labels: cfg.Labels,
		follow: cfg.Follow}
	switch {
	case cfg.Resync == 0:
		a.resync = DefaultResync
	case cfg.Resync > 0:
		a.resync = cfg.Resync
	}
	if !IsTCP(cfg.Host) && a.pace.ConnectMax == 0 {
		// A connection attempt to an absent socket costs nothing (R6).
		a.pace.ConnectMax = follow.LocalConnectMax
	}
	a.key = follow.Key(cfg.Host, cfg.CAFile, cfg.CertFile, cfg.KeyFile, string(material))
	a.engineKey = a.key
	if words := cfg.Labels.Words(); len(words) > 0 {
		a.key = follow.Key(a.key, "labels "+strings.Join(words, " "))
	}
	if !cfg.Follow.Empty() {
		// What is read, not which Engine: the EngineKey stays (R5f).
		a.key = follow.Key(a.key, "follow "+cfg.Follow.String())
	}
	return a, nil
}

// Address is the Engine endpoint, $DOCKER_HOST or DefaultHost when the
// Config named none.
func (a *Adapter) Address() string { return a.host }

// Key identifies every setting that shapes the connection, the TLS files'
// contents included: equal keys can share one connection. It is a hash,
// safe to keep, since the files hold a private key.
func (a *Adapter) Key() string { return a.key }

// EngineKey identifies the Engine reached: its endpoint and TLS files'
// contents, not how its labels are read nor which containers it follows. Connections with equal
// EngineKeys and different Keys (a route reading caddy-docker-proxy's
// labels beside one that does not) follow one Engine, and share what is
// the Engine's: its instances' scale-to-zero state (R5f). A hash.
func (a *Adapter) EngineKey() string { return a.engineKey }

// Loop returns the loop that follows the Engine once: its Run(ctx, sink,
// log) feeds sink until ctx is done, logging to log (nil discards). It
// never returns early: on any failure it logs why and reconnects (see
// follow.Loop). The sink is never cleared on a disconnect, so the last
// known containers keep being routed to (R6).
//
// Each session subscribes to the Engine's container events, lists every
// container (one call; a container is inspected only if the listing does
// not tell its health), then applies each later event by inspecting only
// the container it names, bursts coalesced, so an event costs the same
// whatever the number of containers. Every Resync (DefaultResync) it also
// re-lists every container and applies the differences, so that a lost
// event is corrected, and a stream found stalled is reconnected.
func (a *Adapter) Loop() *follow.Loop {
	return &follow.Loop{Daemon: a, Name: "Docker Engine", Things: "containers", Thing: "container", Address: a.host, Pace: a.pace,
		Resync: a.resync, ResyncTimeout: a.resyncTimeout, StallGrace: a.stallGrace}
}

// Connect implements follow.Daemon.
func (a *Adapter) Connect(_ context.Context, log *zap.Logger) (follow.Conn, error) {
	cli, err := a.NewClient()
	if err != nil {
		return nil, err
	}
	var eng engine = clientEngine{Client: cli, tls: a.tls != nil}
	if a.wrap != nil {
		eng = a.wrap(eng)
	}
	margin := a.stopMargin
	if margin <= 0 {
		margin = DefaultStopMargin
	}
	return &conn{eng: eng, log: log, stopMargin: margin, stopTimeouts: map[string]time.Duration{}, recheck: newRechecks(), labels: a.labels,
		follow: a.follow}, nil
}

// Stop-signal hold bounds (follow.StopBound).
const (
	// EngineStopTimeout is the Engine's stop timeout for a container that
	// sets none (docker stop without -t: SIGKILL 10 s after the signal).
	EngineStopTimeout = 10 * time.Second
	// DefaultStopMargin is added to a container's stop timeout: a
	// container still running that long after a stop signal ignored it.
	DefaultStopMargin = 5 * time.Second
)

// Explain implements follow.Daemon.
func (a *Adapter) Explain(err error) follow.End { return Explain(err) }

// Explain says why a session with the Engine ended (the Swarm adapter,
// which talks to the same Engine API, shares it).
func Explain(err error) follow.End {
	call, reason, auth := describe(err)
	return follow.End{Call: call, Reason: reason, Auth: auth, Unreachable: !auth && unreachable(err)}
}

// unreachable reports whether err says the Engine could not be reached:
// the connection failed, or was closed before any answer.
// ConnectionFailed reports the Docker client's own error for an Engine it
// could not connect to (for the standby's R5g, which must not import the
// client).
func ConnectionFailed(err error) bool { return client.IsErrConnectionFailed(err) }

func unreachable(err error) bool {
	if err == nil {
		return false
	}
	_, err = follow.Call(err)
	if client.IsErrConnectionFailed(err) {
		return true
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return closedByPeer(err)
}

// describe turns a session's error into the call at fault, a reason a user
// can act on, and whether the Engine refused this client (which no
// reconnection fixes, so it is an error even after a listing).
func describe(err error) (call, reason string, auth bool) {
	if err == nil {
		return "", "session ended", false
	}
	call, err = follow.Call(err)
	if r, ok := tlsReason(err); ok {
		return call, r, true
	}
	connFailed := client.IsErrConnectionFailed(err)
	// The HTTP layer's error quotes the request URL, which changes at
	// every attempt (the since parameter): keep only its cause, so that a
	// reason stays the same from one attempt to the next.
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	switch {
	case closedByPeer(err):
		return call, "the Engine ended the connection", false
	case cerrdefs.IsUnauthorized(err):
		return call, "the Engine refused this client (unauthorized): " + err.Error(), true
	case cerrdefs.IsPermissionDenied(err), errors.Is(err, syscall.EACCES):
		return call, "permission denied (the user running Caddy needs access to the Engine's socket): " + err.Error(), true
	case connFailed:
		return call, "cannot connect: " + err.Error(), false
	}
	return call, err.Error(), false
}

// closedByPeer reports whether err says, in any of the ways the network
// and HTTP layers do, that the Engine closed the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		// net/http's unexported errServerClosedIdle: closed before any
		// response.
		strings.Contains(err.Error(), "server closed idle connection")
}

// tlsReason describes a failed TLS handshake, from the typed error alone
// (the wrapping varies from one attempt to the next).
func tlsReason(err error) (string, bool) {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verify           *tls.CertificateVerificationError
		record           tls.RecordHeaderError
		alert            tls.AlertError
		opErr            *net.OpError
	)
	var cause error
	switch {
	case errors.As(err, &verify):
		cause = verify
	case errors.As(err, &unknownAuthority):
		cause = unknownAuthority
	case errors.As(err, &hostname):
		cause = hostname
	case errors.As(err, &invalid):
		cause = invalid
	case errors.As(err, &alert):
		return "TLS handshake failed: the Engine refused it (" + alert.Error() + "): check the client certificate and key", true
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// How crypto/tls reports an alert from the peer over TCP.
		return "TLS handshake failed: the Engine refused it (" + opErr.Err.Error() + "): check the client certificate and key", true
	case errors.As(err, &record):
		return "TLS handshake failed: the Engine does not speak TLS on this port", true
	default:
		return "", false
	}
	return "TLS handshake failed: " + cause.Error(), true
}

var (
	_ follow.Conn       = (*conn)(nil)
	_ follow.Prefetcher = (*conn)(nil)
)

// conn is one session's connection: the Docker Engine's side of
// follow.Conn.
type conn struct {
	eng engine
	log *zap.Logger
	// stopTimeouts are the containers' own stop timeouts, as inspections
	// told (a container without one is not in it).
	stopTimeouts map[string]time.Duration
	stopMargin   time.Duration
	// recheck holds the containers to inspect again once their health
	// check's next result is due (R1c).
	recheck *rechecks
	// versioned is set once the daemon told its version; podman is set
	// when it is Podman (R11p), whose listing needs more inspections.
	versioned, podman bool
	// version is what the Engine said of itself (R9a), handed to the
	// session with the first listing.
	version daemonver.Version
	// rootless is set when the daemon says it runs rootless (R11r): its
	// containers' addresses are inside the user's network namespace, and
	// only published ports reach them.
	rootless bool
	// labels are the label sets read (R2f, Config.Labels).
	labels foreignlabels.Set
	// follow is the selector of the containers seen (R2g, Config.Follow);
	// unfollowed holds those found not to match it, whose events the
	// stream drops: a container's labels never change, so each is decided
	// once, at the listing or its first inspection.
	follow     selector.Selector
	unfollowed unfollowed
}

// StopBound implements follow.StopBound: the container's stop timeout
// (its StopTimeout, Compose's stop_grace_period, else the Engine's 10 s)
// plus a margin. A `docker stop -t` longer than that is not known to the
// adapter: a container still running past the bound is routed to again
// until its SIGKILL.
func (c *conn) StopBound(id string) time.Duration {
	d, ok := c.stopTimeouts[id]
	switch {
	case !ok:
		d = EngineStopTimeout
	case d < 0:
		return 0 // no bound
	}
	return d + c.stopMargin
}

func (c *conn) Close() error {
	c.recheck.stop()
	return c.eng.Close()
}

// rechecks are containers to inspect again at a time, as if an event had
// named them: a resumed container whose "unhealthy" is not a verdict yet
// (R1c) gets no event when its next check fails too (the Engine logs a
// health_status event only when the status changes), so the adapter looks
// again when that check's result is due.
type rechecks struct {
	mu     sync.Mutex
	timers map[string]*time.Timer
	due    []string
	// ready has a value while due is not empty.
	ready   chan struct{}
	stopped bool
}

func newRechecks() *rechecks {
	return &rechecks{timers: map[string]*time.Timer{}, ready: make(chan struct{}, 1)}
}

// after asks for id to be reported again in d, unless it is already due
// sooner.
func (r *rechecks) after(id string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || r.timers[id] != nil {
		return
	}
	r.timers[id] = time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.timers, id)
		if r.stopped {
			return
		}
		r.due = append(r.due, id)
		select {
		case r.ready <- struct{}{}:
		default:
		}
	})
}

// take returns the ids that are due, and forgets them.
func (r *rechecks) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.due
	r.due = nil
	return ids
}

// stop cancels every recheck: the session is over.
func (r *rechecks) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for _, t := range r.timers {
		t.Stop()
	}
	clear(r.timers)
}

// Subscribe asks for the container events. The Engine answers the
// subscription a moment before it registers it, so it asks for the events
// since just before subscribing: the Engine replays any that fell in
// between (an event already reflected by the listing costs one spare
// inspection, nothing more).
func (c *conn) Subscribe(ctx context.Context) (follow.Stream, error) {
	since := time.Now()
	msgs, errs := c.eng.Events(ctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: eventFilters(),
	})
	return func(report func(follow.Event)) error {
		for {
			select {
			case err, ok := <-errs:
				if !ok || err == nil {
					err = io.EOF
				}
				return follow.WrapCall("Events", err)
			case m := <-msgs:
				ev, ok := ContainerEvent(m)
				if !ok {
					continue
				}
				if ev.ID == "" {
					c.log.Debug("ignoring a container event without a container ID", zap.String("action", string(m.Action)))
					continue
				}
				if c.unfollowed.skip(ev.ID, ev.Deleted) {
					continue // not followed (R2g): nothing to fetch, nothing to mark
				}
				report(ev)
			case <-c.recheck.ready:
				for _, id := range c.recheck.take() {
					report(follow.Event{ID: id})
				}
			}
		}
	}, nil
}

// List lists every container in one call; a container is inspected only
// if the listing does not tell its health.
func (c *conn) List(ctx context.Context) (follow.Listing, error) {
	if !c.versioned {
		// Podman's version answer can take seconds (it asks its package
		// manager): bounded, and without one the listing is read as
		// Podman's, which costs inspections, never a wrong route.
		vctx, cancel := context.WithTimeout(ctx, versionTimeout)
		v, err := c.eng.ServerVersion(vctx)
		cancel()
		c.versioned, c.podman = err == nil, err != nil || isPodman(v)
		if err == nil {
			c.version = versionOf(v)
		}
		if err != nil {
			c.log.Debug("no version answer: reading the listing as Podman's", zap.Error(err))
		}
		c.rootless = c.askRootless(ctx)
	}
	translate := fromListed
	if c.podman {
		translate = func(l Listed) (catalog.Instance, bool) { return podmanSummary(l.Summary) }
	}
	var list []Listed
	var err error
	if !c.podman && HealthInList(c.version.API) {
		// Docker 29 (API 1.52) gives each container's health beside it.
		list, err = c.eng.ContainerListHealth(ctx, container.ListOptions{All: true})
	} else {
		var sums []container.Summary
		sums, err = c.eng.ContainerList(ctx, container.ListOptions{All: true})
		list = listed(sums)
	}
	if err != nil {
		return follow.Listing{}, follow.WrapCall("ContainerList", err)
	}
	all := make([]catalog.Instance, 0, len(list))
	inspected := 0
	var unfollowed map[string]struct{}
	for _, s := range list {
		if !c.follows(s.Labels) {
			// Not followed (R2g): not inspected either.
			if unfollowed == nil {
				unfollowed = map[string]struct{}{}
			}
			unfollowed[s.ID] = struct{}{}
			continue
		}
		in, ok := translate(s)
		if !ok {
			// The Status text does not tell this running container's
			// health: inspect it (only it).
			inspected++
			cctx, cancel := context.WithTimeout(ctx, follow.CallTimeout)
			in, err = c.Fetch(cctx, s.ID)
			cancel()
			if errors.Is(err, follow.ErrNotFound) {
				continue // removed meanwhile; its destroy event follows
			}
			if errors.Is(err, follow.ErrUnusable) {
				continue // not followed after all (R2g)
			}
			if err != nil {
				return follow.Listing{}, err
			}
		}
		all = append(all, c.translated(in))
	}
	notFollowed := len(unfollowed) // counted before the stream may change the set
	c.unfollowed.replace(unfollowed)
	fields := []zap.Field{zap.String("api_version", c.eng.ClientVersion())}
	if c.podman {
		fields = append(fields, zap.Bool("podman", true))
	}
	if c.rootless {
		fields = append(fields, zap.Bool("rootless", true))
	}
	if inspected > 0 {
		fields = append(fields, zap.Int("inspected_for_health", inspected))
	}
	if !c.follow.Empty() {
		// R2g: which containers this connection sees, and how many it
		// left out, on the "connected" line: a selector that matches
		// nothing (quotes kept from an env file) is not a silent empty
		// catalog.
		fields = append(fields, zap.Stringer("follow", c.follow), zap.Int("not_followed", notFollowed))
	}
	return follow.Listing{Instances: all, Fields: fields, Version: c.version}, nil
}

// Fetch inspects one container.
func (c *conn) Fetch(ctx context.Context, id string) (catalog.Instance, error) {
	raw, err := c.Inspect(ctx, id)
	return c.Finish(id, raw, err)
}

// Inspect is Fetch's Engine call (follow.Prefetcher): a burst of events
// is inspected several containers at once.
func (c *conn) Inspect(ctx context.Context, id string) (any, error) {
	return c.eng.ContainerInspect(ctx, id)
}

// Finish is the rest of Fetch (follow.Prefetcher), in the session's
// goroutine: it keeps the container's stop timeout and recheck, and
// translates it.
func (c *conn) Finish(id string, raw any, err error) (catalog.Instance, error) {
	in, _ := raw.(container.InspectResponse)
	if cerrdefs.IsNotFound(err) || podmanGone(err) {
		delete(c.stopTimeouts, id)
		return catalog.Instance{}, follow.WrapCall("ContainerInspect", follow.ErrNotFound)
	}
	if err != nil {
		return catalog.Instance{}, follow.WrapCall("ContainerInspect", err)
	}
	var labels map[string]string // none without a Config: decided as the listing decides one without labels
	if in.Config != nil {
		labels = in.Config.Labels
	}
	if !c.follows(labels) {
		// Not followed (R2g): never in the sink, its later events dropped.
		c.unfollowed.add(id)
		c.log.Debug("container not followed: its labels do not match the follow selector", zap.String("id", id),
			zap.Stringer("follow", c.follow))
		return catalog.Instance{}, follow.WrapCall("ContainerInspect", follow.ErrUnusable)
	}
	if in.Config != nil && in.Config.StopTimeout != nil {
		// Negative: the Engine waits for it forever, and so does the hold.
		c.stopTimeouts[id] = time.Duration(*in.Config.StopTimeout) * time.Second
	} else {
		delete(c.stopTimeouts, id)
	}
	if in.State != nil && in.State.Running && !in.State.Paused {
		if d, resumed := resumedCheck(in.State.Health, in.Config); resumed {
			c.recheck.after(id, d)
		}
	}
	return c.translated(fromInspect(in)), nil
}

// Refresh has nothing to do: the Engine's stream reports no daemon-wide
// change (a network's gateway comes with each container).
func (c *conn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

// ContainerEvent says which container an event is about and what it tells
// before any inspection (the Swarm adapter reads its task containers' events
// with it) (destroyed; stopping: a kill with a stop signal,
// die or stop; started); ok is false for an event that changes nothing
// reported.
func ContainerEvent(m events.Message) (ev follow.Event, ok bool) {
	switch m.Type {
	case events.ContainerEventType:
		ev.ID = m.Actor.ID
		if ev.ID == "" {
			ev.ID = m.ID //nolint:staticcheck // an older Engine's field
		}
		action := string(m.Action)
		if action == "" {
			action = m.Status //nolint:staticcheck // an older Engine's field
		}
		switch events.Action(action) {
		case events.ActionDestroy, actionRemove:
			ev.Deleted = true
			return ev, true
		case events.ActionKill:
			if !slices.Contains(stopSignals, m.Actor.Attributes["signal"]) {
				return follow.Event{}, false
			}
			ev.Stopping, ev.Why = true, killWhy(m.Actor.Attributes["signal"])
			return ev, true
		case events.ActionDie, actionDied:
			// An older Podman's died event has no exitCode (nor labels):
			// containerExitCode, else "exited".
			ev.Stopping, ev.Why = true, dieWhy(cmp.Or(m.Actor.Attributes["exitCode"], m.Actor.Attributes["containerExitCode"]))
			return ev, true
		case events.ActionStop:
			ev.Stopping, ev.Why = true, "stopped (docker stop)"
			return ev, true
		case events.ActionStart:
			ev.Started = true
			return ev, true
		}
		for _, a := range containerActions {
			if action == string(a) || a == events.ActionHealthStatus && strings.HasPrefix(action, string(a)) {
				return ev, true
			}
		}
		return follow.Event{}, false
	case events.NetworkEventType:
		if m.Action == events.ActionConnect || m.Action == events.ActionDisconnect {
			return follow.Event{ID: m.Actor.Attributes["container"]}, true
		}
	}
	return follow.Event{}, false
}

// signalNames names the signals a stop or a death reports, by number.
var signalNames = map[string]string{
	"1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "6": "SIGABRT", "9": "SIGKILL",
	"11": "SIGSEGV", "13": "SIGPIPE", "15": "SIGTERM",
}

// signalName is "SIGTERM" for "15", "TERM" or "SIGTERM"; "signal <n>" for
// a number it does not know.
func signalName(s string) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	if _, err := strconv.Atoi(s); err == nil {
		return "signal " + s
	}
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return s
}

// killWhy says what a kill event with a stopping signal means.
func killWhy(signal string) string {
	name := signalName(signal)
	if name == "SIGKILL" {
		return "killed with SIGKILL (docker kill, docker rm -f, or the end of a stop's grace period)"
	}
	return "sent " + name + " to stop (docker stop, or docker kill -s " + strings.TrimPrefix(name, "SIG") + ")"
}

// dieWhy says what a die event's exit code means: 128+n is a death by
// signal n, another non-zero code the app's own failure.
func dieWhy(exitCode string) string {
	code, err := strconv.Atoi(exitCode)
	switch {
	case err != nil:
		return "exited"
	case code == 0:
		return "exited with code 0"
	case code > 128 && code < 160:
		return "exited with code " + exitCode + " (killed by " + signalName(strconv.Itoa(code-128)) + ")"
	}
	return "exited with code " + exitCode + " (crashed or failed)"
}
