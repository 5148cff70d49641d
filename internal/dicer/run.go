package dicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// Adapter follows one Dicer daemon. New makes it from a Config, which it
// checks, and whose CA file it reads, once.
type Adapter struct {
	address  string
	opts     []grpc.DialOption
	listNets bool
	pace     follow.Pace
	key      string
	// caughtUp bounds the wait for the event history's end (caught_up);
	// zero: DefaultCaughtUpTimeout.
	caughtUp time.Duration
}

// DefaultCaughtUpTimeout bounds how long a session waits, after
// subscribing, for the daemon to say its event history is through
// (caught_up): a daemon that never says it ends the session, with a
// reason saying so, and the loop reconnects.
const DefaultCaughtUpTimeout = follow.CallTimeout

// New checks cfg and reads its CA file. Each error names the setting at
// fault ("address: ...", "token: ...", "tls: ...", "tls ca: ...").
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	roots, pem, err := loadRoots(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	opts, err := dialOptions(cfg, roots)
	if err != nil {
		return nil, err
	}
	addr := cfg.address()
	a := &Adapter{
		address:  addr,
		opts:     opts,
		listNets: listsNetworks(addr),
		pace:     cfg.Pace,
	}
	if !IsTCP(addr) && a.pace.ConnectMax == 0 {
		// A connection attempt to an absent socket costs nothing (R6).
		a.pace.ConnectMax = follow.LocalConnectMax
	}
	a.key = follow.Key(addr, strings.TrimSpace(cfg.Token), string(pem), cfg.ServerName)
	return a, nil
}

// Address is the daemon's gRPC target, DefaultAddress when the Config
// named none.
func (a *Adapter) Address() string { return a.address }

// Key identifies every setting that shapes the connection, the CA file's
// contents included: equal keys can share one connection. It is a hash,
// safe to keep, since the settings hold the token.
func (a *Adapter) Key() string { return a.key }

// Loop returns the loop that follows the daemon once: its Run(ctx, sink,
// log) feeds sink until ctx is done, logging to log (nil discards). It
// never returns early: on any failure it logs why and reconnects (see
// follow.Loop). The sink is never cleared on a disconnect, so the last
// known instances keep being routed to (R6).
//
// Each session subscribes to the daemon's events, waits until the stored
// history is caught up, lists networks (for gateway addresses) and
// instances, then applies each later instance event by fetching that one
// instance.
func (a *Adapter) Loop() *follow.Loop {
	return &follow.Loop{Daemon: a, Name: "Dicer daemon", Things: "instances", Thing: "instance", Address: a.address, Pace: a.pace}
}

// Connect implements follow.Daemon.
func (a *Adapter) Connect(_ context.Context, log *zap.Logger) (follow.Conn, error) {
	cc, err := grpc.NewClient(a.address, a.opts...)
	if err != nil {
		return nil, err
	}
	caughtUp := a.caughtUp
	if caughtUp <= 0 {
		caughtUp = DefaultCaughtUpTimeout
	}
	return &conn{cc: cc, client: dicerpb.NewDaemonServiceClient(cc), log: log, listNets: a.listNets, caughtUp: caughtUp,
		warnedHostIP: map[string]bool{}}, nil
}

// Explain implements follow.Daemon.
func (a *Adapter) Explain(err error) follow.End { return explain(err) }

// explain says why a session ended. Falling behind the daemon's events
// has its own warning: the daemon cut the session off.
func explain(err error) follow.End {
	call, reason, code := describe(err)
	e := follow.End{Call: call, Reason: reason, Auth: isAuthProblem(code, reason)}
	// UNAVAILABLE before any answer: no socket, or nothing listening.
	_, cause := follow.Call(err)
	e.Unreachable = code == codes.Unavailable && !e.Auth && !errors.Is(cause, io.EOF)
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

// conn is one session's connection: the Dicer daemon's side of
// follow.Conn.
type conn struct {
	cc       *grpc.ClientConn
	client   dicerpb.DaemonServiceClient
	log      *zap.Logger
	listNets bool // false when not wanted or not permitted
	gateways map[string]string
	caughtUp time.Duration
	// warnedHostIP holds the instances whose refused host addresses (R4b)
	// were warned about this session.
	warnedHostIP map[string]bool
	// versioned is set once GetHostInfo was asked this session (R9a).
	versioned bool
}

func (c *conn) Close() error { return c.cc.Close() }

// Subscribe asks for the events from now on (limit 1 skips the stored
// history, which the listing makes moot) and reads until the daemon says
// the history is through.
//
// A daemon that does not say caught_up within the caughtUp bound ends the
// session (errNoCaughtUp).
func (c *conn) Subscribe(ctx context.Context) (follow.Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	var late atomic.Bool
	deadline := time.AfterFunc(c.caughtUp, func() { late.Store(true); cancel() })
	stream, err := c.client.GetEvents(sctx, &dicerpb.GetEventsRequest{Follow: true, Limit: 1})
	if err != nil {
		deadline.Stop()
		cancel()
		return nil, follow.WrapCall("GetEvents", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			deadline.Stop()
			cancel()
			if late.Load() && ctx.Err() == nil {
				err = fmt.Errorf("%w within %v", errNoCaughtUp, c.caughtUp)
			}
			return nil, follow.WrapCall("GetEvents", err)
		}
		if resp.GetCaughtUp() {
			break // this reply's events, if any, are history too
		}
	}
	if !deadline.Stop() {
		// It fired as the answer came: the stream is cancelled.
		cancel()
		return nil, follow.WrapCall("GetEvents", fmt.Errorf("%w within %v", errNoCaughtUp, c.caughtUp))
	}
	// cancel is left to ctx: the stream lives on.
	return func(report func(follow.Event)) error {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return follow.WrapCall("GetEvents", err)
			}
			for _, ev := range resp.GetEvents() {
				switch ev.GetKind() {
				case dicerpb.EventKind_EVENT_KIND_INSTANCE:
					if ev.GetId() == "" {
						c.log.Debug("ignoring an instance event without an instance ID", zap.String("instance", ev.GetName()))
						continue
					}
					report(instanceEvent(ev))
				case dicerpb.EventKind_EVENT_KIND_NETWORK:
					report(follow.Event{DaemonWide: true})
				}
			}
		}
	}, nil
}

// errNoCaughtUp ends a session whose daemon never said its event history
// was through.
var errNoCaughtUp = errors.New("the daemon did not say its event history was through (caught_up)")

// List lists the networks, for their gateways, then the instances.
func (c *conn) List(ctx context.Context) (follow.Listing, error) {
	if c.listNets {
		if err := c.listNetworks(ctx); err != nil {
			return follow.Listing{}, err
		}
	}
	var all []catalog.Instance
	err := listInstances(ctx, c.cc, func(n int) { all = make([]catalog.Instance, 0, n) }, func(in *dicerpb.Instance) {
		c.warnHostIPs(in)
		all = append(all, translateListed(in, c.gateways))
	})
	if err != nil {
		return follow.Listing{}, follow.WrapCall("ListInstances", err)
	}
	listing := follow.Listing{Instances: all, Fields: []zap.Field{zap.Bool("networks_listed", c.listNets)}}
	if !c.versioned {
		c.versioned = true
		listing.Version = c.hostVersion(ctx)
	}
	return listing, nil
}

// hostVersion asks GetHostInfo for the daemon's version (R9a), once per
// session; a daemon that does not answer it has none (a debug line).
func (c *conn) hostVersion(ctx context.Context) daemonver.Version {
	vctx, cancel := context.WithTimeout(ctx, follow.CallTimeout)
	defer cancel()
	info, err := c.client.GetHostInfo(vctx, &dicerpb.GetHostInfoRequest{})
	if err != nil {
		c.log.Debug("GetHostInfo did not answer: the daemon's version is unknown", zap.Error(err))
		return daemonver.Version{}
	}
	return daemonver.New("dicerd", info.GetVersion(), "")
}

// Fetch gets one instance: one GetInstance per pending ID, whatever the
// number of instances.
func (c *conn) Fetch(ctx context.Context, id string) (catalog.Instance, error) {
	in, err := c.client.GetInstance(ctx, &dicerpb.GetInstanceRequest{Name: id})
	if status.Code(err) == codes.NotFound {
		return catalog.Instance{}, follow.WrapCall("GetInstance", follow.ErrNotFound)
	}
	if err != nil {
		return catalog.Instance{}, follow.WrapCall("GetInstance", err)
	}
	if in.GetId() != id {
		// A daemon that answers for another instance: applying it would
		// put that instance's state (or a forged one) under this ID.
		c.log.Error("the Dicer daemon answered GetInstance with another instance: ignored",
			zap.String("asked", id), zap.String("answered", in.GetId()), zap.String("instance", in.GetName()))
		return catalog.Instance{}, follow.WrapCall("GetInstance", follow.ErrUnusable)
	}
	c.warnHostIPs(in)
	return translate(in, c.gateways), nil
}

// warnHostIPs warns, once per instance and session, about the port
// mappings R4b never dials.
func (c *conn) warnHostIPs(in *dicerpb.Instance) {
	ips := refusedHostIPs(in)
	if len(ips) == 0 || c.warnedHostIP[in.GetId()] {
		return
	}
	c.warnedHostIP[in.GetId()] = true
	c.log.Warn("published port not used: its host address is link-local, multicast or not an IP address (R4b); "+
		"requests go to the instance's own address",
		zap.String("instance", in.GetName()), zap.Strings("host_ip", ips))
}

// Refresh follows a network event: it re-lists networks and returns the
// known instances whose gateway changed (network events are rare, so O(n)
// is fine here).
func (c *conn) Refresh(ctx context.Context, known map[string]catalog.Instance) ([]catalog.Instance, error) {
	if !c.listNets {
		return nil, nil
	}
	if err := c.listNetworks(ctx); err != nil {
		return nil, err
	}
	var changed []catalog.Instance
	for _, in := range known {
		if len(in.Networks) != 1 {
			continue
		}
		if att := in.Networks[0]; c.gateways[att.Network] != att.Gateway {
			// A new slice: the sink keeps the instance it was given.
			att.Gateway = c.gateways[att.Network]
			in.Networks = []catalog.Attachment{att}
			changed = append(changed, in)
		}
	}
	return changed, nil
}

// listNetworks learns the gateway of each network. A token without
// networks:read is warned about once per session and the session goes on
// without gateways.
func (c *conn) listNetworks(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, follow.CallTimeout)
	defer cancel()
	resp, err := c.client.ListNetworks(cctx, &dicerpb.ListNetworksRequest{})
	if err != nil {
		if code := status.Code(err); code == codes.PermissionDenied || code == codes.Unimplemented {
			_, reason, _ := describe(err)
			c.log.Warn("cannot list the Dicer daemon's networks, so gateway addresses are unknown: "+
				"ports published on every host address are reached only via published_port_host; "+
				"grant the token networks:read or use a TCP address that is not loopback",
				zap.String("error", reason))
			c.listNets = false
			c.gateways = nil
			return nil
		}
		return follow.WrapCall("ListNetworks", err)
	}
	c.gateways = gatewayMap(resp.GetNetworks())
	return nil
}

// instanceEvent is what an instance event tells before any fetch: only a
// deletion. Dicer records STOPPED, EXITED and DIED once the guest is down,
// and has no event for a stop in progress; the fetch each event brings
// shows the state (STOPPING while a stop is in progress, which R1 keeps out
// of rotations), at the cost of one GetInstance, so no event is read as
// "stopping" ahead of it.
func instanceEvent(ev *dicerpb.Event) follow.Event {
	return follow.Event{ID: ev.GetId(), Deleted: ev.GetAction() == dicerpb.EventAction_EVENT_ACTION_DELETED}
}
