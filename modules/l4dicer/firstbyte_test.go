package l4dicer

import (
	"context"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	l4 "github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// fixedSource routes every connection to one address and counts the asks;
// it keeps the last ask's client, whose share of max_held a hold for a
// wake would count under (R5d).
type fixedSource struct {
	dial   string
	asked  atomic.Int64
	client atomic.Value // of netip.Prefix
}

func (s *fixedSource) ConnTargets(ctx context.Context, _ string) []connection.Target {
	s.asked.Add(1)
	if c, ok := clients.From(ctx); ok {
		s.client.Store(c)
	}
	return []connection.Target{{Dial: s.dial, Instance: "echo"}}
}
func (s *fixedSource) Opened(connection.Target) func() { return func() {} }

// firstByteProxy is a Proxy as Provision leaves it, on src, with a real
// loopback listener whose accepted connections it handles; it returns the
// listener's address and the channel of Handle's results. perClient 0:
// max_waiting_per_client's default.
func firstByteProxy(t *testing.T, src connSource, timeout time.Duration, maxWaiting, perClient int) (*Proxy, string, chan error) {
	t.Helper()
	p := &Proxy{source: src, logger: zap.NewNop(), FirstByteTimeout: caddy.Duration(timeout), MaxWaiting: maxWaiting, MaxWaitingPerClient: perClient}
	p.setCaps()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	results := make(chan error, 4096)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				cx := l4.WrapConnection(c, nil, zap.NewNop())
				results <- p.Handle(cx, nil)
			}()
		}
	}()
	return p, ln.Addr().String(), results
}

// R14c: a connection that sends nothing within first_byte_timeout is
// closed without asking the source for an instance; one that sends is
// proxied, its first bytes first.
func TestL4_R14c_silent_connection_closed_after_first_byte_timeout(t *testing.T) {
	up := echoUpstream(t)
	src := &fixedSource{dial: up.Addr().String()}
	const timeout = 200 * time.Millisecond
	_, addr, results := firstByteProxy(t, src, timeout, 16, 0)

	// The proxy's deadline is set once it has accepted the connection,
	// so after the dial began: from then, the connection is held for
	// first_byte_timeout at least (from after the dial returned, it
	// need not be, when this goroutine waits for a CPU meanwhile).
	start := time.Now()
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	select {
	case err := <-results:
		if err != nil {
			t.Errorf("a silent connection: Handle returned %v, want nil (nothing to route)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a connection that sends nothing was still held after 10 s (first_byte_timeout 200ms)")
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("closed after %s, before first_byte_timeout", took)
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("the silent client reads %d, %v; want EOF", n, err)
	}
	if n := src.asked.Load(); n != 0 {
		t.Errorf("the source was asked %d times for a connection that sent nothing", n)
	}

	talker, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	_ = talker.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := talker.Write([]byte("PING")); err != nil {
		t.Fatal(err)
	}
	_ = talker.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(talker)
	if err != nil || string(got) != "PING" {
		t.Errorf("a talking client got %q, %v; want its bytes echoed", got, err)
	}
}

// R14c: connections waiting for their first bytes count under
// max_waiting; one beyond it is closed at once.
func TestL4_R14c_waiting_connections_capped(t *testing.T) {
	src := &fixedSource{dial: "127.0.0.1:1"}
	p, addr, results := firstByteProxy(t, src, time.Minute, 3, 0)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.waiting.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections waiting, want 3", p.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, extra)
	select {
	case err := <-results:
		if err == nil || !strings.Contains(err.Error(), "max_waiting") {
			t.Errorf("the fourth connection: %v, want refused under max_waiting", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fourth connection was held beyond max_waiting 3")
	}
	if n := p.waiting.Load(); n != 3 {
		t.Errorf("%d waiting after the refusal, want 3", n)
	}
}

// R14c: a connection waiting for its first bytes holds no copy buffer:
// the heap per idle connection stays far below the two 32 KiB buffers it
// took before. The measure is logged (docs/layer4.md).
func TestL4_R14c_idle_connection_costs_no_copy_buffers(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 sockets")
	}
	const n = 500
	src := &fixedSource{dial: "127.0.0.1:1"}
	p, addr, _ := firstByteProxy(t, src, time.Minute, n, n)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(20 * time.Second)
	for p.waiting.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections waiting, want %d", p.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	perConn := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("per idle connection: %d bytes of heap (client and server side), %.1f goroutines",
		perConn, float64(runtime.NumGoroutine()-goroutines)/n)
	if perConn > 2*copyBufSize/4 {
		t.Errorf("per idle connection %d bytes of heap: copy buffers taken before the first byte?", perConn)
	}
}

// echoServer echoes every connection it accepts until its client's end
// of input; it returns its address.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback address from (127.0.0.x: a
// client of its own).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// R14c: one client that holds max_waiting idle connections open (an
// outsider re-opening them every first_byte_timeout) waits with at most
// max_waiting_per_client of them, the rest closed at once; another
// client's connection still gets through, and so do the outsider's own
// once it sends.
func TestL4_R14c_one_client_cannot_fill_max_waiting(t *testing.T) {
	const maxWaiting = 32
	src := &fixedSource{dial: echoServer(t)}
	p, addr, _ := firstByteProxy(t, src, time.Minute, maxWaiting, 0)
	share := p.MaxWaitingPerClient
	if share != 4 || share >= maxWaiting {
		t.Fatalf("max_waiting_per_client defaults to %d of %d, want 4", share, maxWaiting)
	}
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range maxWaiting {
		idle = append(idle, dialFrom(t, "127.0.0.1", addr))
	}
	// Every idle connection beyond the share is closed at once: count the
	// ones that read EOF.
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c.Read(make([]byte, 1)); n == 0 && err == io.EOF {
			closed++
		}
	}
	if closed != maxWaiting-share {
		t.Errorf("%d of the outsider's %d idle connections were closed, want %d (all but max_waiting_per_client)",
			closed, maxWaiting, maxWaiting-share)
	}
	if n := p.waiting.Load(); n > int64(share) {
		t.Errorf("%d connections wait, want at most the outsider's share %d", n, share)
	}

	for _, from := range []string{"127.0.0.2", "127.0.0.3"} {
		c := dialFrom(t, from, addr)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("PING")); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if string(got) != "PING" {
			t.Errorf("a client at %s while another holds max_waiting idle connections: got %q, %v; want PING echoed", from, got, err)
		}
		if c, _ := src.client.Load().(netip.Prefix); c.String() != from+"/32" {
			t.Errorf("the source was asked for a connection of %s with client %s in its context, want %s/32 (R5d's share)", from, c, from)
		}
	}
}
