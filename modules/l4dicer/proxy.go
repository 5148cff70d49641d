// Package l4dicer routes TCP connections and UDP flows of Caddy's layer-4 app
// (github.com/mholt/caddy-l4) to the instances a machine daemon runs,
// chosen by their labels, with the same daemon settings, catalog,
// readiness, rotation and scale to zero as the HTTP upstream sources of
// caddy-dicer. Build it in with xcaddy beside caddy-l4:
//
//	xcaddy build --with github.com/mholt/caddy-l4@v0.1.2 \
//		--with github.com/caddy-dicer/caddy-dicer \
//		--with github.com/caddy-dicer/caddy-dicer/modules/l4dicer
//
// A Caddy built without this package has no layer-4 code of ours, nor
// caddy-l4's.
package l4dicer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	l4 "github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

func init() {
	caddy.RegisterModule(new(Proxy))
}

// Proxy is the layer-4 handler `dicer_proxy`: it proxies a connection to
// one routable instance of a route, chosen by a source of caddy-dicer
// (`docker`, `dicer` or `swarm`, with the same settings as in
// `reverse_proxy { dynamic ... }`), one connection per pick, in rotation
// (R14). For a route with nothing routable it wakes an instance (scale to
// zero, R5) and holds the connection, not resetting it, until the instance
// is ready or `wake_timeout` passes (R14a). A connection is activity: an
// instance with an open connection does not go on standby (R14b).
//
//	layer4 {
//		:5432 {
//			route {
//				dicer_proxy docker app=pg 5432
//			}
//		}
//	}
//
// On a UDP listener (`udp/:53`), each flow of datagrams (one client
// address and port) goes to one instance, woken by its first datagram,
// which is delivered once it is ready (R14d); `max_flows` and
// `max_flows_per_client` bound the flows.
//
// By TLS server name: after caddy-l4's `tls` matcher, the name the client
// asked for routes as a request's host does, by the `caddy.host` label:
//
//	layer4 {
//		:443 {
//			@db tls sni *.db.example.com
//			route @db {
//				dicer_proxy docker
//			}
//		}
//	}
type Proxy struct {
	// SourceRaw is the caddy-dicer source of the route: a module of
	// `http.reverse_proxy.upstreams` that routes connections (docker,
	// dicer, swarm), with its settings.
	SourceRaw json.RawMessage `json:"source,omitempty" caddy:"namespace=http.reverse_proxy.upstreams inline_key=source"`

	// WakeOn says what wakes an instance for a connection that finds
	// none routable: `data`, the client's first bytes (default; a port
	// scan that connects and closes wakes nothing), or `connect`, the
	// connection itself, for protocols where the server speaks first
	// (MySQL, SMTP, FTP).
	WakeOn string `json:"wake_on,omitempty"`

	// DialTimeout bounds the connection to an instance. Default: 10s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// FirstByteTimeout bounds the wait for a client's first bytes under
	// `wake_on data` (R14c): a connection that sends nothing within it is
	// closed, having cost no instance and no copy buffer. Default: 5s.
	FirstByteTimeout caddy.Duration `json:"first_byte_timeout,omitempty"`

	// MaxWaiting caps the connections waiting for their first bytes at
	// once, per handler (R14c); one beyond it is closed at once, with a
	// debug log. Default: 1024.
	MaxWaiting int `json:"max_waiting,omitempty"`

	// MaxWaitingPerClient caps the connections one client (an IPv4
	// address, an IPv6 /64) may have waiting for their first bytes at
	// once, of max_waiting (R14c): one beyond it is closed at once, while
	// other clients still get through. Default: an eighth of
	// max_waiting, at least 4 (128 of the default 1024).
	MaxWaitingPerClient int `json:"max_waiting_per_client,omitempty"`

	// MaxFlows caps the UDP flows (the datagrams of one client address
	// and port) open at once, per handler (R14d); a new flow beyond it is
	// dropped at once, with a debug log. Each holds a socket to its
	// instance and two 9,000-byte buffers. Default: 1024.
	MaxFlows int `json:"max_flows,omitempty"`

	// MaxFlowsPerClient caps the UDP flows one client (an IPv4 address,
	// an IPv6 /64) may have open at once, of max_flows (R14d). Default:
	// an eighth of max_flows, at least 4 (128 of the default 1024).
	MaxFlowsPerClient int `json:"max_flows_per_client,omitempty"`

	source     connSource
	next       atomic.Uint32
	waiting    atomic.Int64   // connections waiting for their first bytes; UDP flows for their instance
	shares     *clients.Share // of waiting, per client
	flows      atomic.Int64   // UDP flows open
	flowShares *clients.Share // of flows, per client
	logger     *zap.Logger
	bufs       sync.Pool // of *[copyBufSize]byte: two per open connection
	dgrams     sync.Pool // of *[maxDatagram]byte: two per UDP flow
}

// connSource is what the sources of caddy-dicer answer for a connection
// (see connection.Target).
type connSource interface {
	ConnTargets(ctx context.Context, host string) []connection.Target
	Opened(t connection.Target) (closed func())
}

const (
	wakeOnData    = "data"
	wakeOnConnect = "connect"

	defaultDialTimeout      = 10 * time.Second
	defaultFirstByteTimeout = 5 * time.Second
	defaultMaxWaiting       = 1024
	// firstReadSize is the most of a client's first bytes read before an
	// instance is chosen: a small buffer while the client may send
	// nothing, the copy buffers only once it did.
	firstReadSize = 512
	// copyBufSize is the size of each direction's copy buffer; the
	// client's first read, before an instance is chosen, is at most as
	// much.
	copyBufSize = 32 << 10
)

// CaddyModule returns the Caddy module information.
func (*Proxy) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "layer4.handlers.dicer_proxy",
		New: func() caddy.Module { return new(Proxy) },
	}
}

// Provision loads the source, which joins its daemon's shared connection.
func (p *Proxy) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	switch p.WakeOn {
	case "", wakeOnData, wakeOnConnect:
	default:
		return setting.Errorf("wake_on", "%q is neither %q nor %q", p.WakeOn, wakeOnData, wakeOnConnect)
	}
	if p.DialTimeout < 0 {
		return setting.Errorf("dial_timeout", "%s is negative", time.Duration(p.DialTimeout))
	}
	if p.FirstByteTimeout < 0 {
		return setting.Errorf("first_byte_timeout", "%s is negative", time.Duration(p.FirstByteTimeout))
	}
	if p.FirstByteTimeout == 0 {
		p.FirstByteTimeout = caddy.Duration(defaultFirstByteTimeout)
	}
	if p.MaxWaiting < 0 {
		return setting.Errorf("max_waiting", "%d is negative", p.MaxWaiting)
	}
	if p.MaxWaitingPerClient < 0 {
		return setting.Errorf("max_waiting_per_client", "%d is negative", p.MaxWaitingPerClient)
	}
	if p.MaxFlows < 0 {
		return setting.Errorf("max_flows", "%d is negative", p.MaxFlows)
	}
	if p.MaxFlowsPerClient < 0 {
		return setting.Errorf("max_flows_per_client", "%d is negative", p.MaxFlowsPerClient)
	}
	p.setCaps()
	if p.SourceRaw == nil {
		return setting.Errorf("source", "a source is required, e.g. `dicer_proxy docker app=pg 5432`")
	}
	mod, err := ctx.LoadModule(p, "SourceRaw")
	if err != nil {
		return fmt.Errorf("loading the source: %w", err)
	}
	src, ok := mod.(connSource)
	if !ok {
		return setting.Errorf("source", "%T does not route connections", mod)
	}
	p.source = src
	return nil
}

// setCaps fills in the defaults of the waiting caps (R14c).
func (p *Proxy) setCaps() {
	if p.MaxWaiting == 0 {
		p.MaxWaiting = defaultMaxWaiting
	}
	if p.MaxWaitingPerClient == 0 {
		p.MaxWaitingPerClient = clients.ShareOf(p.MaxWaiting)
	}
	p.shares = clients.NewShare(p.MaxWaitingPerClient)
	if p.MaxFlows == 0 {
		p.MaxFlows = defaultMaxFlows
	}
	if p.MaxFlowsPerClient == 0 {
		p.MaxFlowsPerClient = clients.ShareOf(p.MaxFlows)
	}
	p.flowShares = clients.NewShare(p.MaxFlowsPerClient)
}

// Handle proxies cx to an instance of the route: a TCP connection, or a
// flow of a UDP listener (R14d).
func (p *Proxy) Handle(cx *l4.Connection, _ l4.Handler) error {
	if isPacket(cx) {
		return p.handlePacket(cx)
	}
	client, known := clients.Of(cx.RemoteAddr())
	var first []byte
	if p.WakeOn != wakeOnConnect && len(cx.MatchingBytes()) == 0 {
		// caddy-l4's matchers read nothing: wait for the client's first
		// bytes (a connect and close wakes nothing).
		var err error
		if first, err = p.firstBytes(cx, client, known); first == nil {
			return err
		}
	}
	host, _ := cx.Replacer().GetString("l4.tls.server_name")
	ctx := cx.Context
	if known {
		ctx = clients.With(ctx, client) // a hold for a wake counts under the client's share of max_held (R5d)
	}
	targets := p.source.ConnTargets(ctx, host)
	if len(targets) == 0 {
		return fmt.Errorf("no instance is routable for %s (server name %q)", cx.LocalAddr(), host)
	}
	bufDown, bufUp := p.getBuf(), p.getBuf()
	defer p.bufs.Put(bufDown)
	defer p.bufs.Put(bufUp)
	up, t, err := p.dial(cx.Context, "tcp", targets)
	if err != nil {
		return err
	}
	defer up.Close()
	closed := p.source.Opened(t)
	defer closed()
	if err := sendPrefix(up, cx, first, bufUp[:]); err != nil {
		return fmt.Errorf("writing to %s (%s): %w", t.Instance, t.Dial, err)
	}
	pipe(cx, up, bufDown[:], bufUp[:])
	return nil
}

// firstBytes waits for the client's first bytes (R14c): at most
// FirstByteTimeout, in a buffer of firstReadSize, counted under
// MaxWaiting and, for a client with an IP address (known), under its
// MaxWaitingPerClient. It returns nil when there is nothing to route: the
// client closed, sent nothing in time, or too many wait already (then
// the error says so, for caddy-l4's log).
func (p *Proxy) firstBytes(cx *l4.Connection, client netip.Prefix, known bool) ([]byte, error) {
	if p.waiting.Add(1) > int64(p.MaxWaiting) {
		p.waiting.Add(-1)
		p.logger.Debug("closing a connection: too many wait for their first bytes",
			zap.Int("max_waiting", p.MaxWaiting), zap.String("remote", cx.RemoteAddr().String()))
		return nil, fmt.Errorf("%d connections wait for their first bytes already (max_waiting)", p.MaxWaiting)
	}
	defer p.waiting.Add(-1)
	if known {
		if !p.shares.Take(client) {
			p.logger.Debug("closing a connection: its client has too many waiting for their first bytes",
				zap.Int("max_waiting_per_client", p.MaxWaitingPerClient), zap.String("client", client.String()))
			return nil, fmt.Errorf("client %s has %d connections waiting for their first bytes already (max_waiting_per_client)",
				client, p.MaxWaitingPerClient)
		}
		defer p.shares.Give(client)
	}
	if err := cx.SetReadDeadline(time.Now().Add(time.Duration(p.FirstByteTimeout))); err != nil {
		return nil, err
	}
	buf := make([]byte, firstReadSize)
	n, err := cx.Read(buf)
	if n == 0 {
		var timeout net.Error
		if err == nil || errors.Is(err, io.EOF) || errors.As(err, &timeout) && timeout.Timeout() {
			return nil, nil // closed, or nothing sent within first_byte_timeout: nothing to route
		}
		return nil, err
	}
	if err := cx.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// getBuf returns a copy buffer from the pool.
func (p *Proxy) getBuf() *[copyBufSize]byte {
	if b, ok := p.bufs.Get().(*[copyBufSize]byte); ok {
		return b
	}
	return new([copyBufSize]byte)
}

// sendPrefix writes to up what the client sent before the connection to
// up opened: first, the bytes read to wake an instance, then what
// caddy-l4 read for its matchers and holds yet (drained through buf,
// which may be first's own), so that cx's reads afterwards come from its
// socket alone.
func sendPrefix(up net.Conn, cx *l4.Connection, first, buf []byte) error {
	if len(first) > 0 {
		if _, err := up.Write(first); err != nil {
			return err
		}
	}
	for len(cx.MatchingBytes()) > 0 {
		n, err := cx.Read(buf) // from caddy-l4's buffer: does not block
		if n > 0 {
			if _, err := up.Write(buf[:n]); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dial connects to the next target in rotation over network (tcp, udp),
// trying each once.
func (p *Proxy) dial(ctx context.Context, network string, targets []connection.Target) (net.Conn, connection.Target, error) {
	timeout := time.Duration(p.DialTimeout)
	if timeout == 0 {
		timeout = defaultDialTimeout
	}
	d := net.Dialer{Timeout: timeout}
	start := int(p.next.Add(1))
	var errs []error
	for i := range targets {
		t := targets[(start+i)%len(targets)]
		c, err := d.DialContext(ctx, network, t.Dial)
		if err == nil {
			return c, t, nil
		}
		p.logger.Debug("dial failed", zap.String("instance", t.Instance), zap.String("dial", t.Dial), zap.Error(err))
		errs = append(errs, fmt.Errorf("%s (%s): %w", t.Instance, t.Dial, err))
	}
	return nil, connection.Target{}, fmt.Errorf("no instance answered: %w", errors.Join(errs...))
}

// closeWriter is a connection whose writing side shuts down alone.
type closeWriter interface{ CloseWrite() error }

// pipe copies both ways until both sides are done: each side's end of
// input shuts down the other's writing side (a half-close), so that a
// client that ends its requests still reads the answers. Between two TCP
// connections (no TLS ended here, no wrapper of caddy-l4's such as
// proxy_protocol; caddy-l4's buffer drained by sendPrefix) it reads and
// writes the sockets themselves; caddy-l4's byte counts in its debug log
// then miss what was copied so. It copies through the pooled buffers, not
// with splice(2) (Go's TCPConn.ReadFrom): for small messages such as
// Redis's, splice measured no faster unpipelined and slower pipelined.
func pipe(down *l4.Connection, up net.Conn, bufDown, bufUp []byte) {
	var downRW, upRW net.Conn = down, up
	if tcp, ok := down.Conn.(*net.TCPConn); ok && len(down.MatchingBytes()) == 0 {
		downRW = tcp
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.CopyBuffer(writerOnly{upRW}, readerOnly{downRW}, bufUp)
		closeWrite(up)
	})
	_, _ = io.CopyBuffer(writerOnly{downRW}, readerOnly{upRW}, bufDown)
	closeWrite(down.Conn)
	wg.Wait()
}

// readerOnly and writerOnly hide a connection's ReadFrom and WriteTo, so
// that io.CopyBuffer copies through its buffer.
type (
	readerOnly struct{ io.Reader }
	writerOnly struct{ io.Writer }
)

// closeWrite shuts down c's writing side, or closes c if it cannot.
func closeWrite(c net.Conn) {
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	dicer_proxy <source> [<selector> [<port>]] {
//		wake_on data|connect
//		dial_timeout <duration>
//		first_byte_timeout <duration>
//		max_waiting <count>
//		max_waiting_per_client <count>
//		max_flows <count>
//		max_flows_per_client <count>
//		<the source's settings>
//	}
//
// where <source> is `docker`, `dicer` or `swarm` and the rest is what
// `dynamic <source>` takes in reverse_proxy: `dicer_proxy docker app=pg
// 5432`, `dicer_proxy swarm { selector app=redis  port 6379 }`.
func (p *Proxy) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // dicer_proxy
	if !d.NextArg() {
		return d.Errf("dicer_proxy needs a source: docker, dicer or swarm")
	}
	name := d.Val()
	seg := d.NewFromNextSegment() // from the source's name on

	if err := p.takeOwnSettings(seg); err != nil {
		return err
	}
	seg.Reset()
	seg.Next() // UnmarshalModule starts the source's dispenser at the current token
	unm, err := caddyfile.UnmarshalModule(seg, "http.reverse_proxy.upstreams."+name)
	if err != nil {
		return err
	}
	p.SourceRaw = caddyconfig.JSONModuleObject(unm, "source", name, nil)
	return nil
}

// takeOwnSettings reads the handler's own settings out of the source's
// block, deleting their tokens so that the source sees only its own.
func (p *Proxy) takeOwnSettings(d *caddyfile.Dispenser) error {
	d.Next()          // the source's name
	for d.NextArg() { // its selector and port
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		if d.Nesting() > nesting+1 {
			key = "" // in a block of the source's, such as tls
		}
		switch key {
		case "wake_on":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if v != wakeOnData && v != wakeOnConnect {
				return d.Errf("wake_on: %q is neither %q nor %q", v, wakeOnData, wakeOnConnect)
			}
			p.WakeOn = v
			d.DeleteN(2)
		case "dial_timeout":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return d.Errf("dial_timeout: %q is not a positive duration (e.g. 5s)", v)
			}
			p.DialTimeout = caddy.Duration(dur)
			d.DeleteN(2)
		case "first_byte_timeout":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return d.Errf("first_byte_timeout: %q is not a positive duration (e.g. 5s)", v)
			}
			p.FirstByteTimeout = caddy.Duration(dur)
			d.DeleteN(2)
		case "max_waiting", "max_waiting_per_client", "max_flows", "max_flows_per_client":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return d.Errf("%s: %q is not a positive whole number", key, v)
			}
			switch key {
			case "max_waiting":
				p.MaxWaiting = n
			case "max_waiting_per_client":
				p.MaxWaitingPerClient = n
			case "max_flows":
				p.MaxFlows = n
			default:
				p.MaxFlowsPerClient = n
			}
			d.DeleteN(2)
		default: // the source's, or in a block of the source's
			for d.NextArg() {
			}
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Proxy)(nil)
	_ caddyfile.Unmarshaler = (*Proxy)(nil)
	_ l4.NextHandler        = (*Proxy)(nil)
)
