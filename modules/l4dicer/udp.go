package l4dicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	l4 "github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/clients"
)

// UDP (R14d). On a UDP listener of caddy-l4 (`udp/:53`), a "connection"
// is a flow: the datagrams of one client address and port, which caddy-l4
// hands to one handler until none came for the server's `idle_timeout`
// (default 30s). dicer_proxy gives each flow one socket connected to the
// chosen instance, copies the client's datagrams to it one by one, and its
// answers back to the client.
//
// While the instance wakes, the flow keeps reading its client's datagrams
// (caddy-l4's listener delivers every flow's datagrams from one loop,
// which stalls for all clients while one flow's queue of five is full),
// keeps the first of them, at most firstDatagrams and firstDatagramBytes,
// and drops the rest; once the instance is chosen they go to it in order.

const (
	// defaultMaxFlows bounds the UDP flows one handler has open.
	defaultMaxFlows = 1024
	// maxDatagram is the largest datagram copied either way, the size of
	// caddy-l4's own buffers (jumbo frames): a larger one never reaches a
	// handler from the client, and one from an instance is cut to it.
	maxDatagram = 9000
	// firstDatagrams and firstDatagramBytes bound what a flow keeps of
	// its client's datagrams while its instance wakes.
	firstDatagrams     = 8
	firstDatagramBytes = 16 << 10
	// resendFirst bounds the resends of the first datagrams that the
	// instance refused (ICMP port unreachable: it does not listen yet).
	resendFirst = 20
	// lateAnswers is how long a flow that caddy-l4 ended while its
	// instance woke still carries answers after the datagrams it kept
	// reached the instance (linger).
	lateAnswers = 5 * time.Second
)

// isPacket reports whether cx is a flow of datagrams (caddy-l4's UDP
// or unixgram listener) rather than a stream.
func isPacket(cx *l4.Connection) bool {
	if a := cx.LocalAddr(); a != nil {
		switch a.Network() {
		case "udp", "udp4", "udp6", "unixgram":
			return true
		}
	}
	return false
}

// flow is one UDP flow being proxied.
type flow struct {
	p  *Proxy
	cx *l4.Connection

	mu        sync.Mutex
	up        net.Conn // nil until an instance is chosen
	held      [][]byte // the client's datagrams while up is nil, in order
	heldBytes int
	dropped   int
	first     [][]byte  // what went to up at once, kept for a resend until its first answer
	delivered time.Time // when the datagrams kept while it woke went to the instance
	answered  atomic.Bool

	// doneWaiting gives back the flow's place under max_waiting, once.
	doneWaiting func()
}

// handlePacket proxies a UDP flow (R14d): it counts under max_flows and
// its client's max_flows_per_client, and under max_waiting and
// max_waiting_per_client until its instance is chosen; a flow beyond one
// of them is ended at once (its datagrams dropped), with a debug log.
func (p *Proxy) handlePacket(cx *l4.Connection) error {
	buf := p.getDatagramBuf()
	defer p.dgrams.Put(buf)
	client, known := clients.Of(cx.RemoteAddr())
	release, why := p.takeFlow(client, known)
	if release == nil {
		p.logger.Debug("dropping a UDP flow: "+why, zap.String("remote", cx.RemoteAddr().String()))
		endFlow(cx, buf[:], false)
		return nil
	}
	defer release()
	f := &flow{p: p, cx: cx}
	f.doneWaiting = sync.OnceFunc(func() { p.doneWaiting(client, known) })
	defer f.doneWaiting()
	defer func() {
		f.mu.Lock()
		if f.up != nil {
			_ = f.up.Close()
		}
		f.mu.Unlock()
	}()

	// The first datagram: caddy-l4 starts a flow at it, so it is there.
	if err := cx.SetReadDeadline(time.Now().Add(time.Duration(p.FirstByteTimeout))); err != nil {
		return err
	}
	n, err := cx.Read(buf[:])
	if n > 0 {
		f.fromClient(buf[:n])
	}
	if n == 0 || err != nil {
		endFlow(cx, buf[:], errors.Is(err, io.EOF))
		return nil
	}
	if err := cx.SetReadDeadline(time.Time{}); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(cx.Context)
	defer cancel()
	var wg sync.WaitGroup
	var wakeErr error
	connected := make(chan struct{}) // closed once connect has sent the held datagrams, or ended
	wg.Go(func() {
		defer stopReading(cx) // the instance's side ended: so does the flow
		wakeErr = f.connect(ctx, client, known, connected)
	})
	var err2 error
	for {
		var n int
		n, err2 = cx.Read(buf[:])
		if n > 0 {
			f.fromClient(buf[:n])
		}
		if err2 != nil {
			break // the server's idle_timeout (io.EOF), or the instance's side ended
		}
	}
	if errors.Is(err2, io.EOF) {
		// caddy-l4 ended the flow: read what it still delivers until it
		// has forgotten the flow, then carry the answers.
		drain(cx, buf[:], f.fromClient)
		f.linger(connected)
	}
	cancel()
	f.mu.Lock()
	if f.up != nil {
		_ = f.up.Close() // ends relayDown
	}
	f.mu.Unlock()
	wg.Wait()
	endFlow(cx, buf[:], errors.Is(err2, io.EOF))
	if f.dropped > 0 {
		p.logger.Debug("dropped datagrams of a UDP flow while its instance woke",
			zap.Int("dropped", f.dropped), zap.String("remote", cx.RemoteAddr().String()))
	}
	return wakeErr
}

// linger keeps a flow that caddy-l4 ended (no datagram from its client
// for the server's idle_timeout) carrying answers while they may come:
// until its instance is chosen and the datagrams kept meanwhile are sent
// (a wake may take longer than idle_timeout), then lateAnswers after they
// were sent. A flow whose datagrams went to its instance as they came had
// idle_timeout for its answers already, and ends at once. The client's
// next datagram starts a new flow meanwhile; answers to this one still
// reach it.
func (f *flow) linger(connected chan struct{}) {
	<-connected
	f.mu.Lock()
	wait := time.Until(f.delivered.Add(lateAnswers))
	up := f.up
	f.mu.Unlock()
	if up != nil && wait > 0 {
		time.Sleep(wait)
	}
}

// closeOnce closes c unless it is closed.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// takeFlow counts a new flow under max_flows and max_flows_per_client
// until release, and under max_waiting and max_waiting_per_client until
// doneWaiting; nil and why when a cap is full.
func (p *Proxy) takeFlow(client netip.Prefix, known bool) (release func(), why string) {
	if p.flows.Add(1) > int64(p.MaxFlows) {
		p.flows.Add(-1)
		return nil, "too many flows (max_flows)"
	}
	if known && !p.flowShares.Take(client) {
		p.flows.Add(-1)
		return nil, "its client has too many flows (max_flows_per_client)"
	}
	if p.waiting.Add(1) > int64(p.MaxWaiting) {
		p.waiting.Add(-1)
		p.giveFlow(client, known)
		return nil, "too many flows wait for an instance (max_waiting)"
	}
	if known && !p.shares.Take(client) {
		p.waiting.Add(-1)
		p.giveFlow(client, known)
		return nil, "its client has too many flows waiting for an instance (max_waiting_per_client)"
	}
	return func() { p.giveFlow(client, known) }, ""
}

func (p *Proxy) giveFlow(client netip.Prefix, known bool) {
	p.flows.Add(-1)
	if known {
		p.flowShares.Give(client)
	}
}

// doneWaiting gives back a flow's place under max_waiting.
func (p *Proxy) doneWaiting(client netip.Prefix, known bool) {
	p.waiting.Add(-1)
	if known {
		p.shares.Give(client)
	}
}

// connect chooses the flow's instance, waking one if none is routable
// (held under the client's share of max_held, R5d), sends it what the
// client sent meanwhile and copies its answers back until it ends.
func (f *flow) connect(ctx context.Context, client netip.Prefix, known bool, connected chan struct{}) error {
	defer closeOnce(connected)
	p := f.p
	hold := ctx
	if known {
		hold = clients.With(ctx, client) // a hold for a wake counts under the client's share of max_held (R5d)
	}
	targets := p.source.ConnTargets(hold, "")
	f.doneWaiting()
	if len(targets) == 0 {
		if ctx.Err() != nil {
			return nil // the client went quiet first
		}
		return fmt.Errorf("no instance is routable for %s", f.cx.LocalAddr())
	}
	up, t, err := p.dial(ctx, "udp", targets)
	if err != nil {
		return err
	}
	closed := p.source.Opened(t) // an open flow is activity (R14b)
	defer closed()
	f.mu.Lock()
	f.up = up
	f.first, f.held = f.held, nil
	for _, d := range f.first {
		_, _ = up.Write(d)
	}
	f.delivered = time.Now()
	f.mu.Unlock()
	closeOnce(connected)
	if ctx.Err() != nil {
		return nil
	}
	buf := p.getDatagramBuf()
	defer p.dgrams.Put(buf)
	f.relayDown(ctx, up, buf[:])
	return nil
}

// fromClient sends a client's datagram to the instance, or keeps it
// while there is none yet (the first firstDatagrams, firstDatagramBytes
// in all; the rest are dropped).
func (f *flow) fromClient(d []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.up != nil {
		if _, err := f.up.Write(d); errors.Is(err, syscall.ECONNREFUSED) {
			_, _ = f.up.Write(d) // the error was an earlier datagram's
		}
		return
	}
	if len(f.held) >= firstDatagrams || f.heldBytes+len(d) > firstDatagramBytes {
		f.dropped++
		return
	}
	f.held = append(f.held, append([]byte(nil), d...))
	f.heldBytes += len(d)
}

// relayDown copies the instance's datagrams to the client until up is
// closed, or refuses once it has answered. A refusal before its first
// answer (ICMP port unreachable: the instance does not listen yet, say a
// UDP service that binds after its TCP port accepted) sends the first
// datagrams again, with a growing pause, at most resendFirst times.
func (f *flow) relayDown(ctx context.Context, up net.Conn, buf []byte) {
	pause := 10 * time.Millisecond
	resends := 0
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if !f.answered.Swap(true) {
				f.mu.Lock()
				f.first = nil
				f.mu.Unlock()
			}
			_, _ = f.cx.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || f.answered.Load() || resends >= resendFirst {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
		resends++
		f.mu.Lock()
		for _, d := range f.first {
			_, _ = up.Write(d)
		}
		f.mu.Unlock()
	}
}

// stopReading ends a blocked read of cx's: caddy-l4's packet connection
// checks its deadline in whole seconds, so it is set well in the past.
func stopReading(cx *l4.Connection) {
	_ = cx.SetReadDeadline(time.Unix(1, 0))
}

// endFlow closes a flow of caddy-l4's and reads what its client sent
// until caddy-l4 has forgotten it. caddy-l4 v0.1.2 delivers every flow's
// datagrams from one loop, blocking while a flow's queue (5 datagrams) is
// full, and learns that a flow ended from a message that loop reads: a
// handler that returned without reading on would let a client that sends
// fast stall the listener for every client. told: the last read ended
// with io.EOF, so caddy-l4 was told already (its idle_timeout) and is not
// told again (each message forgets the flow of that address, a newer one
// too). buf must hold a whole datagram (maxDatagram), so that a read never
// keeps a part of one behind while Close runs.
func endFlow(cx *l4.Connection, buf []byte, told bool) {
	done := make(chan struct{})
	go func() {
		if !told {
			_ = cx.Close()
		}
		close(done)
	}()
	drain(cx, buf, nil)
	<-done
}

// drain reads cx until caddy-l4 has closed its queue (io.EOF), at most 3
// seconds, handing each datagram to sink if it is not nil.
func drain(cx *l4.Connection, buf []byte, sink func([]byte)) {
	_ = cx.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		n, err := cx.Read(buf)
		if n > 0 && sink != nil {
			sink(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// getDatagramBuf returns a datagram buffer from the pool.
func (p *Proxy) getDatagramBuf() *[maxDatagram]byte {
	if b, ok := p.dgrams.Get().(*[maxDatagram]byte); ok {
		return b
	}
	return new([maxDatagram]byte)
}
