package dicer

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// Deadlines of the unary calls. Keepalive catches a dead TCP peer; these
// catch a daemon that accepts a call and never answers it.
const (
	callTimeout = 30 * time.Second
	listTimeout = 2 * time.Minute
)

// Run follows the daemon until ctx is done, feeding sink. It never returns
// early: on any failure it logs why and reconnects with backoff. The sink is
// never cleared on a disconnect, so the last known instances keep being
// routed to (R6). An invalid cfg is logged and Run waits for ctx.
//
// Each connection attempt is a session: subscribe to the daemon's events,
// wait until the stored history is caught up, list networks (for gateway
// addresses) and instances, Replace the sink's contents, then apply each
// later instance event by fetching that one instance.
func Run(ctx context.Context, cfg Config, sink catalog.Sink) {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	addr := cfg.address()
	log = log.With(zap.String("address", addr))
	if err := cfg.Validate(); err != nil {
		log.Error("invalid Dicer daemon settings: not connecting", zap.Error(err))
		<-ctx.Done()
		return
	}
	opts, err := dialOptions(cfg)
	if err != nil { // unreachable after Validate, kept for safety
		log.Error("invalid Dicer daemon settings: not connecting", zap.Error(err))
		<-ctx.Done()
		return
	}
	f := &follower{
		target:   addr,
		opts:     opts,
		log:      log,
		sink:     sink,
		listNets: listsNetworks(addr),
	}
	newLoop(log, f.session).Run(ctx, follow.NewBackoff(cfg.MinBackoff, cfg.MaxBackoff))
}

// newLoop follows the daemon with session.
func newLoop(log *zap.Logger, session func(ctx context.Context, reconnect bool) (bool, error)) *follow.Loop {
	return &follow.Loop{Daemon: "Dicer daemon", Things: "instances", Log: log, Session: session, Explain: explain}
}

type follower struct {
	target   string
	opts     []grpc.DialOption
	log      *zap.Logger
	sink     catalog.Sink
	listNets bool
}

// explain says why a session ended. Falling behind the daemon's events
// has its own warning: the daemon cut this follower off.
func explain(err error) follow.End {
	call, reason, code := describe(err)
	e := follow.End{Call: call, Reason: reason, Auth: isAuthProblem(code, reason)}
	if code == codes.ResourceExhausted {
		e.Lost = "fell behind the Dicer daemon's events and was cut off: reconnecting to re-list"
	}
	return e
}

const (
	// handshakeFailed precedes the TLS error in grpc-go's connection errors.
	handshakeFailed = "authentication handshake failed: "
	// tlsReason starts the reason logged for a refused TLS connection.
	tlsReason = "TLS handshake failed: "
)

func isAuthProblem(code codes.Code, reason string) bool {
	return code == codes.Unauthenticated || code == codes.PermissionDenied || strings.HasPrefix(reason, tlsReason)
}

// describe turns a session's error into the RPC at fault, a reason a user
// can act on, and the gRPC code.
func describe(err error) (call, reason string, code codes.Code) {
	if err == nil {
		return "", "session ended", codes.OK
	}
	call, err = follow.Call(err)
	if errors.Is(err, io.EOF) {
		return call, "the daemon ended the event stream", codes.Unavailable
	}
	st, _ := status.FromError(err)
	code, msg := st.Code(), st.Message()
	// grpc-go reports a failed TLS handshake (a fingerprint mismatch from
	// VerifyConnection, an untrusted CA, a wrong name) as UNAVAILABLE with
	// the TLS error quoted inside the message.
	if i := strings.Index(msg, handshakeFailed); i >= 0 {
		return call, tlsReason + strings.TrimRight(msg[i+len(handshakeFailed):], `"`), code
	}
	for _, marker := range []string{"daemon certificate fingerprint", errNoCertificate.Error()} {
		if i := strings.Index(msg, marker); i >= 0 {
			return call, tlsReason + strings.TrimRight(msg[i:], `"`), code
		}
	}
	switch code {
	case codes.Unauthenticated:
		return call, "daemon refused the token (UNAUTHENTICATED): check the token's secret", code
	case codes.PermissionDenied:
		return call, "daemon refused the token (PERMISSION_DENIED): " + msg, code
	case codes.ResourceExhausted:
		return call, "RESOURCE_EXHAUSTED: " + msg, code
	}
	return call, codeName(code) + ": " + msg, code
}

// codeName spells a gRPC code as the protocol does: DEADLINE_EXCEEDED.
func codeName(c codes.Code) string {
	var b strings.Builder
	name := c.String()
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' && name[i-1] >= 'a' && name[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// session is one connection: it returns whether it got the instance listing
// (and fed it to the sink), and the error that ended it.
func (f *follower) session(ctx context.Context, reconnect bool) (listed bool, err error) {
	conn, err := grpc.NewClient(f.target, f.opts...)
	if err != nil {
		return false, follow.WrapCall("connect", err)
	}
	defer func() { _ = conn.Close() }()
	client := dicerpb.NewDaemonServiceClient(conn)

	sctx, cancel := context.WithCancel(ctx)
	// Subscribe before listing so that nothing is missed; limit 1 skips the
	// stored history, which the listing makes moot.
	stream, err := client.GetEvents(sctx, &dicerpb.GetEventsRequest{Follow: true, Limit: 1})
	if err != nil {
		cancel()
		return false, follow.WrapCall("GetEvents", err)
	}
	q := follow.NewPending()
	caughtUp := make(chan struct{})
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		recvErr <- receive(stream, caughtUp, q, f.log)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	select {
	case <-caughtUp:
	case err := <-recvErr:
		return false, follow.WrapCall("GetEvents", err)
	case <-ctx.Done():
		return false, ctx.Err()
	}

	s := &sessionState{follower: f, client: client, listNets: f.listNets}
	if s.listNets {
		if err := s.listNetworks(sctx); err != nil {
			return false, err
		}
	}
	lctx, lcancel := context.WithTimeout(sctx, listTimeout)
	resp, err := client.ListInstances(lctx, &dicerpb.ListInstancesRequest{})
	lcancel()
	if err != nil {
		return false, follow.WrapCall("ListInstances", err)
	}
	all := make([]catalog.Instance, 0, len(resp.GetInstances()))
	s.known = make(map[string]catalog.Instance, len(resp.GetInstances()))
	for _, in := range resp.GetInstances() {
		ci := translate(in, s.gateways)
		all = append(all, ci)
		s.known[ci.ID] = ci
	}
	f.sink.Replace(all)
	msg := "connected to the Dicer daemon"
	if reconnect {
		msg = "reconnected to the Dicer daemon"
	}
	f.log.Info(msg, zap.Int("instances", len(all)), zap.Bool("networks_listed", s.listNets))

	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-recvErr:
			return true, follow.WrapCall("GetEvents", err)
		case <-q.Notify():
		}
		ids, netsChanged := q.Take()
		if netsChanged && s.listNets {
			if err := s.networksChanged(sctx); err != nil {
				return true, err
			}
		}
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
	client   dicerpb.DaemonServiceClient
	listNets bool // false when not wanted or not permitted
	gateways map[string]string
	known    map[string]catalog.Instance
}

// listNetworks learns the gateway of each network. A token without
// networks:read is warned about once per session and the session goes on
// without gateways.
func (s *sessionState) listNetworks(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := s.client.ListNetworks(cctx, &dicerpb.ListNetworksRequest{})
	if err != nil {
		if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unimplemented {
			_, reason, _ := describe(err)
			s.log.Warn("cannot list the Dicer daemon's networks, so gateway addresses are unknown: "+
				"ports published on every host address are reached only via published_port_host; "+
				"grant the token networks:read or use a TCP address that is not loopback",
				zap.String("error", reason))
			s.listNets = false
			s.gateways = nil
			return nil
		}
		return follow.WrapCall("ListNetworks", err)
	}
	s.gateways = gatewayMap(resp.GetNetworks())
	return nil
}

// networksChanged re-lists networks and re-Puts the known instances whose
// gateway changed (network events are rare, so O(n) is fine here).
func (s *sessionState) networksChanged(ctx context.Context) error {
	if err := s.listNetworks(ctx); err != nil {
		return err
	}
	for id, ci := range s.known {
		if len(ci.Networks) != 1 {
			continue
		}
		if att := ci.Networks[0]; s.gateways[att.Network] != att.Gateway {
			// A new slice: the sink keeps the instance it was given.
			att.Gateway = s.gateways[att.Network]
			ci.Networks = []catalog.Attachment{att}
			s.known[id] = ci
			s.sink.Put(ci)
		}
	}
	return nil
}

// apply brings one instance up to date: one GetInstance per pending ID,
// whatever the number of instances.
func (s *sessionState) apply(ctx context.Context, id string, deleted bool) error {
	if deleted {
		s.drop(id)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	in, err := s.client.GetInstance(cctx, &dicerpb.GetInstanceRequest{Name: id})
	cancel()
	if status.Code(err) == codes.NotFound {
		s.drop(id)
		return nil
	}
	if err != nil {
		return follow.WrapCall("GetInstance", err)
	}
	ci := translate(in, s.gateways)
	if ci.ID == "" {
		ci.ID = id
	}
	s.known[ci.ID] = ci
	s.sink.Put(ci)
	s.log.Debug("instance updated", zap.String("instance", ci.Name), zap.String("id", ci.ID),
		zap.Stringer("state", ci.State), zap.Stringer("health", ci.Health))
	return nil
}

func (s *sessionState) drop(id string) {
	name := s.known[id].Name
	delete(s.known, id)
	s.sink.Delete(id)
	s.log.Debug("instance removed", zap.String("instance", name), zap.String("id", id))
}

// receive reads the event stream: it signals caughtUp once the stored
// history is through (ignoring it: the listing that follows supersedes it),
// then records the instances later events touch. It never calls the daemon,
// so a slow fetch cannot make the daemon cut the stream off.
func receive(stream grpc.ServerStreamingClient[dicerpb.GetEventsResponse], caughtUp chan<- struct{}, q *follow.Pending, log *zap.Logger) error {
	up := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if !up {
			if resp.GetCaughtUp() {
				up = true
				close(caughtUp)
			}
			continue
		}
		for _, ev := range resp.GetEvents() {
			switch ev.GetKind() {
			case dicerpb.EventKind_EVENT_KIND_INSTANCE:
				if ev.GetId() == "" {
					log.Debug("ignoring an instance event without an instance ID", zap.String("instance", ev.GetName()))
					continue
				}
				q.Add(ev.GetId(), ev.GetAction() == dicerpb.EventAction_EVENT_ACTION_DELETED)
			case dicerpb.EventKind_EVENT_KIND_NETWORK:
				q.Flag()
			}
		}
	}
}
