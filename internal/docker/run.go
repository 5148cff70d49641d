package docker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// Deadlines of the calls other than the event stream. TCP keepalive catches
// a dead Engine host; these catch an Engine that accepts a call and never
// answers it.
const (
	callTimeout = 30 * time.Second
	listTimeout = 2 * time.Minute
)

// engine is the part of the Engine API the adapter uses; *client.Client
// implements it. Tests wrap it to count calls.
type engine interface {
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ClientVersion() string
	Close() error
}

// containerActions are the container events that can change what the
// adapter reports of a container (R11). exec_*, attach, top, resize and the
// like cannot, and a health check runs an exec at every interval, so the
// Engine is asked to leave them out. kill is left out too: a kill that
// stops the container is followed by die.
var containerActions = []events.Action{
	events.ActionCreate, events.ActionStart, events.ActionRestart,
	events.ActionStop, events.ActionDie, events.ActionPause,
	events.ActionUnPause, events.ActionRename, events.ActionDestroy,
	events.ActionHealthStatus, // a prefix: "health_status: healthy"
}

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
	for _, a := range containerActions {
		f.Add("event", string(a))
	}
	return f
}

// Run follows the Engine until ctx is done, feeding sink. It never returns
// early: on any failure it logs why and reconnects with backoff. The sink is
// never cleared on a disconnect, so the last known containers keep being
// routed to (R6). An invalid cfg is logged and Run waits for ctx.
//
// Each connection attempt is a session: subscribe to the Engine's container
// events, list every container (one call; a container is inspected only if
// the listing does not tell its health), Replace the sink's contents, then
// apply each later event by inspecting only the container it names, bursts
// coalesced, so an event costs the same whatever the number of containers.
func Run(ctx context.Context, cfg Config, sink catalog.Sink) {
	run(ctx, cfg, sink, nil)
}

// run is Run with a hook that wraps each session's Engine client.
func run(ctx context.Context, cfg Config, sink catalog.Sink, wrap func(engine) engine) {
	cfg = cfg.Resolved()
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("address", cfg.Host))
	if err := cfg.Validate(); err != nil {
		log.Error("invalid Docker Engine settings: not connecting", zap.Error(err))
		<-ctx.Done()
		return
	}
	f := &follower{cfg: cfg, log: log, sink: sink, wrap: wrap}
	newLoop(log, f.session).Run(ctx, follow.NewBackoff(cfg.MinBackoff, cfg.MaxBackoff))
}

// newLoop follows the Engine with session.
func newLoop(log *zap.Logger, session func(ctx context.Context, reconnect bool) (bool, error)) *follow.Loop {
	return &follow.Loop{Daemon: "Docker Engine", Things: "containers", Log: log, Session: session, Explain: explain}
}

type follower struct {
	cfg  Config
	log  *zap.Logger
	sink catalog.Sink
	wrap func(engine) engine
}

// explain says why a session ended.
func explain(err error) follow.End {
	call, reason, auth := describe(err)
	return follow.End{Call: call, Reason: reason, Auth: auth}
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

// session is one connection: it returns whether it got the container
// listing (and fed it to the sink), and the error that ended it.
func (f *follower) session(ctx context.Context, reconnect bool) (listed bool, err error) {
	cli, err := newClient(f.cfg)
	if err != nil {
		return false, follow.WrapCall("connect", err)
	}
	var eng engine = cli
	if f.wrap != nil {
		eng = f.wrap(eng)
	}
	defer func() { _ = eng.Close() }()

	sctx, cancel := context.WithCancel(ctx)
	q := follow.NewPending()
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// Subscribe before listing so that nothing is missed. The Engine
	// answers the subscription a moment before it registers it, so ask for
	// the events since just before subscribing: it replays any that fell
	// in between (an event already reflected by the listing costs one
	// spare inspection, nothing more).
	since := time.Now()
	msgs, errs := eng.Events(sctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: eventFilters(),
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		recvErr <- receive(msgs, errs, q, f.log)
	}()

	lctx, lcancel := context.WithTimeout(sctx, listTimeout)
	list, err := eng.ContainerList(lctx, container.ListOptions{All: true})
	lcancel()
	if err != nil {
		// The subscription's own failure (the Engine is down, refuses
		// this client) says more than the listing's.
		select {
		case rerr := <-recvErr:
			return false, follow.WrapCall("Events", rerr)
		default:
		}
		return false, follow.WrapCall("ContainerList", err)
	}
	select {
	case rerr := <-recvErr:
		return false, follow.WrapCall("Events", rerr)
	default:
	}

	s := &sessionState{follower: f, eng: eng, names: make(map[string]string, len(list))}
	all := make([]catalog.Instance, 0, len(list))
	inspected := 0
	for _, c := range list {
		ci, ok := fromSummary(c)
		if !ok {
			// The Status text does not tell this running container's
			// health: inspect it (only it).
			inspected++
			in, err := s.inspect(sctx, c.ID)
			if cerrdefs.IsNotFound(err) {
				continue // removed meanwhile; its destroy event follows
			}
			if err != nil {
				return false, err
			}
			ci = fromInspect(in)
		}
		all = append(all, ci)
		s.names[ci.ID] = ci.Name
	}
	f.sink.Replace(all)
	msg := "connected to the Docker Engine"
	if reconnect {
		msg = "reconnected to the Docker Engine"
	}
	fields := []zap.Field{zap.Int("containers", len(all)), zap.String("api_version", eng.ClientVersion())}
	if inspected > 0 {
		fields = append(fields, zap.Int("inspected_for_health", inspected))
	}
	f.log.Info(msg, fields...)

	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-recvErr:
			return true, follow.WrapCall("Events", err)
		case <-q.Notify():
		}
		ids, _ := q.Take()
		for id, deleted := range ids {
			if err := s.apply(sctx, id, deleted); err != nil {
				return true, err
			}
		}
	}
}

// sessionState is what one session knows; only the session's goroutine
// uses it.
type sessionState struct {
	*follower
	eng   engine
	names map[string]string // container ID -> name, for the logs
}

func (s *sessionState) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	in, err := s.eng.ContainerInspect(cctx, id)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return in, follow.WrapCall("ContainerInspect", err)
	}
	return in, err
}

// apply brings one container up to date: one ContainerInspect per pending
// ID, whatever the number of containers; none for a destroyed one.
func (s *sessionState) apply(ctx context.Context, id string, deleted bool) error {
	if deleted {
		s.drop(id)
		return nil
	}
	in, err := s.inspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		s.drop(id)
		return nil
	}
	if err != nil {
		return err
	}
	ci := fromInspect(in)
	if ci.ID == "" {
		ci.ID = id
	}
	s.names[ci.ID] = ci.Name
	s.sink.Put(ci)
	s.log.Debug("container updated", zap.String("container", ci.Name), zap.String("id", ci.ID),
		zap.Stringer("state", ci.State), zap.Stringer("health", ci.Health))
	return nil
}

func (s *sessionState) drop(id string) {
	name := s.names[id]
	delete(s.names, id)
	s.sink.Delete(id)
	s.log.Debug("container removed", zap.String("container", name), zap.String("id", id))
}

// receive reads the event stream and records the containers the events
// touch. It never calls the Engine, so a slow inspection cannot make the
// Engine drop events for this subscriber (it drops, for a subscriber that
// does not keep up, rather than cut it off).
func receive(msgs <-chan events.Message, errs <-chan error, q *follow.Pending, log *zap.Logger) error {
	for {
		select {
		case err, ok := <-errs:
			if !ok || err == nil {
				err = io.EOF
			}
			return err
		case m := <-msgs:
			id, deleted, ok := eventContainer(m)
			if !ok {
				continue
			}
			if id == "" {
				log.Debug("ignoring a container event without a container ID", zap.String("action", string(m.Action)))
				continue
			}
			q.Add(id, deleted)
		}
	}
}

// eventContainer says which container an event is about, and whether it
// was destroyed; ok is false for an event that changes nothing reported.
func eventContainer(m events.Message) (id string, deleted, ok bool) {
	switch m.Type {
	case events.ContainerEventType:
		id = m.Actor.ID
		if id == "" {
			id = m.ID //nolint:staticcheck // an older Engine's field
		}
		action := string(m.Action)
		if action == "" {
			action = m.Status //nolint:staticcheck // an older Engine's field
		}
		if action == string(events.ActionDestroy) {
			return id, true, true
		}
		for _, a := range containerActions {
			if action == string(a) || a == events.ActionHealthStatus && strings.HasPrefix(action, string(a)) {
				return id, false, true
			}
		}
		return "", false, false
	case events.NetworkEventType:
		if m.Action == events.ActionConnect || m.Action == events.ActionDisconnect {
			return m.Actor.Attributes["container"], false, true
		}
	}
	return "", false, false
}
