package l4dicer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/clients"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// The UDP tests (R14d) run caddy-l4's own UDP server, in this process
// (caddy.Load, admin off, loopback only): its flows, its one loop
// delivering every flow's datagrams, its idle_timeout. The source is a
// stand-in registered as a module, looked up by name.

func init() {
	caddy.RegisterModule(udpTestSource{})
}

// udpTestSource is a source module that hands the proxy's questions to
// the heldSource registered under Name.
type udpTestSource struct {
	Name string `json:"name"`
}

func (udpTestSource) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.l4dicer_udptest",
		New: func() caddy.Module { return new(udpTestSource) },
	}
}

var heldSources sync.Map // name -> *heldSource

// src is the heldSource of s, nil once its test ended (caddy.Stop does
// not wait for the flows of caddy-l4's handlers to end).
func (s udpTestSource) src() *heldSource {
	v, _ := heldSources.Load(s.Name)
	h, _ := v.(*heldSource)
	return h
}
func (s udpTestSource) ConnTargets(ctx context.Context, host string) []connection.Target {
	if h := s.src(); h != nil {
		return h.ConnTargets(ctx, host)
	}
	return nil
}
func (s udpTestSource) Opened(t connection.Target) func() {
	if h := s.src(); h != nil {
		return h.Opened(t)
	}
	return func() {}
}

// heldSource routes every flow to dial; a flow of a client that hold
// names waits until gate is closed (an instance waking), or its context
// ends. It counts the asks, the flows waiting and open, and their peaks.
type heldSource struct {
	dial string
	gate chan struct{}
	hold func(client netip.Prefix) bool

	asked, waiting, peakWaiting, open, peakOpen, opened atomic.Int64
	mu                                                  sync.Mutex
	perClient                                           map[netip.Prefix]int
	peakPerClient                                       map[netip.Prefix]int
}

func newHeldSource(t *testing.T, dial string) (*heldSource, string) {
	s := &heldSource{dial: dial, gate: make(chan struct{}), perClient: map[netip.Prefix]int{}, peakPerClient: map[netip.Prefix]int{}}
	name := t.Name()
	heldSources.Store(name, s)
	t.Cleanup(func() { heldSources.Delete(name) })
	return s, name
}

func peak(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if v <= old || p.CompareAndSwap(old, v) {
			return
		}
	}
}

func (s *heldSource) ConnTargets(ctx context.Context, _ string) []connection.Target {
	s.asked.Add(1)
	peak(&s.peakWaiting, s.waiting.Add(1))
	defer s.waiting.Add(-1)
	c, _ := clients.From(ctx)
	s.mu.Lock()
	s.perClient[c]++
	s.peakPerClient[c] = max(s.peakPerClient[c], s.perClient[c])
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.perClient[c]--
		s.mu.Unlock()
	}()
	if s.hold == nil || s.hold(c) {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil
		}
	}
	return []connection.Target{{Dial: s.dial, Instance: "udp-echo"}}
}

func (s *heldSource) Opened(connection.Target) func() {
	s.opened.Add(1)
	peak(&s.peakOpen, s.open.Add(1))
	var once sync.Once
	return func() { once.Do(func() { s.open.Add(-1) }) }
}

func (s *heldSource) peakOf(client string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakPerClient[netip.MustParsePrefix(client)]
}

// udpEcho answers each datagram with itself, and records what came, in
// order.
type udpEcho struct {
	pc   net.PacketConn
	mu   sync.Mutex
	got  []string
	seen atomic.Int64
}

func startUDPEcho(t *testing.T) *udpEcho {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveUDPEcho(t, pc)
}

func serveUDPEcho(t *testing.T, pc net.PacketConn) *udpEcho {
	e := &udpEcho{pc: pc}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			e.mu.Lock()
			e.got = append(e.got, string(buf[:n]))
			e.mu.Unlock()
			e.seen.Add(1)
			_, _ = pc.WriteTo(buf[:n], addr)
		}
	}()
	return e
}

// freeUDPPort is a UDP port of 127.0.0.1 free a moment ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// startUDPProxy runs caddy-l4's UDP server on a free port of 127.0.0.1
// with one route: dicer_proxy on the heldSource named src, with settings
// added to the handler's JSON; it returns the listener's address.
func startUDPProxy(t *testing.T, src string, idle time.Duration, settings map[string]any) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	handler := map[string]any{"handler": "dicer_proxy", "source": map[string]any{"source": "l4dicer_udptest", "name": src}}
	for k, v := range settings {
		handler[k] = v
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"layer4": map[string]any{"servers": map[string]any{"udp": map[string]any{
			"listen":       []string{"udp/" + addr},
			"idle_timeout": idle.String(),
			"routes":       []any{map[string]any{"handle": []any{handler}}},
		}}}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	return addr
}

// udpClient is a UDP socket of the client address from (127.0.0.x),
// connected to addr.
func udpClient(t *testing.T, from, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from+":0")), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *net.UDPConn, msgs ...string) {
	t.Helper()
	for _, m := range msgs {
		if _, err := c.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
}

// answered sends m from c every half second until its answer comes
// back, for at most within: the kernel may drop a datagram while a
// flood fills Caddy's socket buffer, which says nothing of the proxy.
func answered(c *net.UDPConn, m string, within time.Duration) error {
	deadline := time.Now().Add(within)
	buf := make([]byte, 65536)
	for time.Now().Before(deadline) {
		if _, err := c.Write([]byte(m)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := c.Read(buf)
		if err == nil && string(buf[:n]) == m {
			return nil
		}
	}
	return fmt.Errorf("no answer to %q within %s", m, within)
}

// receive reads n datagrams from c, each within d.
func receive(c *net.UDPConn, n int, d time.Duration) ([]string, error) {
	var got []string
	buf := make([]byte, 65536)
	for range n {
		_ = c.SetReadDeadline(time.Now().Add(d))
		k, err := c.Read(buf)
		if err != nil {
			return got, err
		}
		got = append(got, string(buf[:k]))
	}
	return got, nil
}

// R14d: the datagrams a client sends while its instance wakes are kept
// and delivered once it is ready, in order; its answers come back.
func TestL4_R14d_first_datagrams_delivered_after_the_wake(t *testing.T) {
	echo := startUDPEcho(t)
	src, name := newHeldSource(t, echo.pc.LocalAddr().String())
	addr := startUDPProxy(t, name, 10*time.Second, nil)
	c := udpClient(t, "127.0.0.1", addr)
	send(t, c, "q1")
	testkit.Eventually(t, 10*time.Second, "the first datagram asks for an instance", func() bool { return src.asked.Load() == 1 })
	send(t, c, "q2", "q3")
	close(src.gate) // the instance is ready
	got, err := receive(c, 3, 10*time.Second)
	if err != nil || strings.Join(got, " ") != "q1 q2 q3" {
		t.Fatalf("the client got %q, %v; want the three datagrams sent while the instance woke, answered in order", got, err)
	}
	send(t, c, "q4")
	if got, err := receive(c, 1, 10*time.Second); err != nil || got[0] != "q4" {
		t.Fatalf("a later datagram: %q, %v", got, err)
	}
	if n := src.asked.Load(); n != 1 {
		t.Errorf("the source was asked %d times for one flow, want 1", n)
	}
	if n := src.open.Load(); n != 1 {
		t.Errorf("%d flows open at the instance, want 1 (an open flow is activity)", n)
	}
}

// R14d: one flow held while its instance wakes, its client sending
// datagram after datagram, does not stall caddy-l4's listener: another
// client is answered meanwhile.
func TestL4_R14d_a_waking_flow_does_not_stall_the_listener(t *testing.T) {
	echo := startUDPEcho(t)
	src, name := newHeldSource(t, echo.pc.LocalAddr().String())
	src.hold = func(c netip.Prefix) bool { return c == netip.MustParsePrefix("127.0.0.1/32") }
	addr := startUDPProxy(t, name, 10*time.Second, nil)
	a := udpClient(t, "127.0.0.1", addr)
	send(t, a, "a0")
	testkit.Eventually(t, 10*time.Second, "client a's flow waits for its instance", func() bool { return src.asked.Load() == 1 })
	for i := range 200 {
		send(t, a, fmt.Sprintf("a%d", i+1))
	}
	b := udpClient(t, "127.0.0.2", addr)
	if err := answered(b, "b", 10*time.Second); err != nil {
		t.Fatalf("client b, while client a's flow waits: %v", err)
	}
	close(src.gate)
	got, err := receive(a, firstDatagrams, 10*time.Second)
	if err != nil || got[0] != "a0" {
		t.Fatalf("client a after the wake: %q, %v; want its first datagrams answered, a0 first", got, err)
	}
}

// R14d: flows are capped in all (max_flows) and per client
// (max_flows_per_client), whatever the addresses they come from (here
// 199 of 127.0.0.0/8, as a flood of spoofed sources would); a flow past
// a cap costs nothing held; flows end after the server's idle_timeout,
// giving back their places and their activity.
func TestL4_R14d_flows_bounded_whatever_the_sources(t *testing.T) {
	echo := startUDPEcho(t)
	src, name := newHeldSource(t, echo.pc.LocalAddr().String())
	const maxFlows, perClient = 8, 2
	const idle = 5 * time.Second
	addr := startUDPProxy(t, name, idle, map[string]any{"max_flows": maxFlows, "max_flows_per_client": perClient, "max_waiting": 100, "max_waiting_per_client": 100})
	var socks []*net.UDPConn
	for range 5 { // one client, five flows (source ports)
		c := udpClient(t, "127.0.0.1", addr)
		send(t, c, "x")
		socks = append(socks, c)
	}
	testkit.Eventually(t, 10*time.Second, "127.0.0.1's flows wait", func() bool { return src.asked.Load() >= perClient })
	for i := 2; i <= 200; i++ {
		c := udpClient(t, fmt.Sprintf("127.0.0.%d", i), addr)
		send(t, c, "x")
		socks = append(socks, c)
	}
	testkit.Eventually(t, 10*time.Second, "max_flows flows wait", func() bool { return src.waiting.Load() == maxFlows })
	close(src.gate)
	answered := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range socks {
		wg.Go(func() {
			if _, err := receive(c, 1, 5*time.Second); err == nil {
				mu.Lock()
				answered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if answered != maxFlows {
		t.Errorf("%d flows answered, want max_flows %d", answered, maxFlows)
	}
	if p := src.peakWaiting.Load(); p > maxFlows {
		t.Errorf("%d flows waited at once, over max_flows %d", p, maxFlows)
	}
	if p := src.peakOf("127.0.0.1/32"); p > perClient {
		t.Errorf("127.0.0.1 had %d flows at once, over max_flows_per_client %d", p, perClient)
	}
	if p := src.peakOpen.Load(); p > maxFlows {
		t.Errorf("%d flows open at once, over max_flows %d", p, maxFlows)
	}
	// idle_timeout after their last datagram, the flows end: their
	// activity with them, and their places.
	testkit.Eventually(t, 3*idle+5*time.Second, "the idle flows end", func() bool { return src.open.Load() == 0 })
	late := udpClient(t, "127.0.0.250", addr)
	send(t, late, "late")
	if got, err := receive(late, 1, 10*time.Second); err != nil || got[0] != "late" {
		t.Fatalf("a new client once the flows ended: %q, %v", got, err)
	}
}

// R14d: the first datagram is not lost when the instance does not listen
// yet on its UDP port (ICMP port unreachable): it is sent again until it
// is answered.
func TestL4_R14d_refused_first_datagram_sent_again(t *testing.T) {
	port := freeUDPPort(t)
	dial := fmt.Sprintf("127.0.0.1:%d", port)
	src, name := newHeldSource(t, dial)
	close(src.gate)
	addr := startUDPProxy(t, name, 10*time.Second, nil)
	c := udpClient(t, "127.0.0.1", addr)
	send(t, c, "early")
	testkit.Eventually(t, 10*time.Second, "the flow has its instance", func() bool { return src.opened.Load() == 1 })
	time.Sleep(100 * time.Millisecond) // not for correctness: lets the first send be refused
	pc, err := net.ListenPacket("udp", dial)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	echo := serveUDPEcho(t, pc)
	if got, err := receive(c, 1, 10*time.Second); err != nil || got[0] != "early" {
		t.Fatalf("the client got %q, %v; want its first datagram answered once the instance listens", got, err)
	}
	if n := echo.seen.Load(); n != 1 {
		t.Errorf("the instance got the datagram %d times, want once (a refused datagram reached nobody)", n)
	}
}

// R14d: what a flow keeps while its instance wakes is bounded: at most
// firstDatagrams datagrams and firstDatagramBytes bytes, the first ones.
func TestL4_R14d_held_datagrams_bounded(t *testing.T) {
	for name, tc := range map[string]struct {
		size, sent, want int
	}{
		"by count": {size: 10, sent: 50, want: firstDatagrams},
		"by bytes": {size: 7000, sent: 5, want: firstDatagramBytes / 7000},
	} {
		t.Run(name, func(t *testing.T) {
			f := &flow{}
			for i := range tc.sent {
				d := make([]byte, tc.size)
				d[0] = byte(i)
				f.fromClient(d)
			}
			if len(f.held) != tc.want || f.dropped != tc.sent-tc.want {
				t.Fatalf("held %d, dropped %d; want %d held, the rest dropped", len(f.held), f.dropped, tc.want)
			}
			for i, d := range f.held {
				if d[0] != byte(i) {
					t.Fatalf("held datagram %d is the %dth sent: the first ones are kept", i, d[0])
				}
			}
			if f.heldBytes > firstDatagramBytes {
				t.Errorf("held %d bytes, over %d", f.heldBytes, firstDatagramBytes)
			}
		})
	}
}

func TestUnmarshalCaddyfile_R14d_flow_settings(t *testing.T) {
	var p Proxy
	if err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dicer_proxy docker app=dns 53 {\n max_flows 64\n max_flows_per_client 8\n}")); err != nil {
		t.Fatal(err)
	}
	if p.MaxFlows != 64 || p.MaxFlowsPerClient != 8 {
		t.Errorf("max_flows %d max_flows_per_client %d, want 64 8", p.MaxFlows, p.MaxFlowsPerClient)
	}
	if strings.Contains(string(p.SourceRaw), "max_flows") {
		t.Errorf("the handler's settings reached the source: %s", p.SourceRaw)
	}
	var q Proxy
	err := q.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dicer_proxy docker {\n max_flows_per_client 0\n}"))
	if err == nil || !strings.Contains(err.Error(), "max_flows_per_client") {
		t.Errorf("error %v, want one naming max_flows_per_client", err)
	}
	q = Proxy{MaxFlows: 16}
	q.setCaps()
	if q.MaxFlowsPerClient != 4 {
		t.Errorf("max_flows_per_client defaults to %d of max_flows 16, want 4", q.MaxFlowsPerClient)
	}
}

// R14d: a client past its share of flows that sends fast stalls nobody:
// the flows dropped are read until caddy-l4 forgets them (else its one
// loop waits on a dropped flow's full queue for good).
func TestL4_R14d_a_dropped_flow_does_not_stall_the_listener(t *testing.T) {
	echo := startUDPEcho(t)
	src, name := newHeldSource(t, echo.pc.LocalAddr().String())
	src.hold = func(c netip.Prefix) bool { return c == netip.MustParsePrefix("127.0.0.1/32") }
	addr := startUDPProxy(t, name, 10*time.Second, map[string]any{"max_flows_per_client": 1})
	a := udpClient(t, "127.0.0.1", addr)
	send(t, a, "held")
	testkit.Eventually(t, 10*time.Second, "client a's first flow waits for its instance", func() bool { return src.asked.Load() == 1 })
	flood := udpClient(t, "127.0.0.1", addr) // a second flow: past the share
	for range 20 {
		for range 100 {
			send(t, flood, "flood")
		}
		time.Sleep(time.Millisecond) // the loopback socket's buffer would drop the rest
	}
	b := udpClient(t, "127.0.0.2", addr)
	if err := answered(b, "b", 10*time.Second); err != nil {
		t.Fatalf("client b, after client a's dropped flow sent 2,000 datagrams: %v", err)
	}
	if n := src.asked.Load(); n != 2 {
		t.Errorf("the source was asked %d times, want 2 (a's held flow and b's): the dropped flows ask nothing", n)
	}
	close(src.gate)
}

// R14d: a wake longer than the server's idle_timeout still answers: the
// flow caddy-l4 ended meanwhile delivers its datagrams once the instance
// is ready and carries the answers back.
func TestL4_R14d_a_wake_longer_than_idle_timeout_is_answered(t *testing.T) {
	echo := startUDPEcho(t)
	src, name := newHeldSource(t, echo.pc.LocalAddr().String())
	const idle = time.Second
	addr := startUDPProxy(t, name, idle, nil)
	c := udpClient(t, "127.0.0.1", addr)
	send(t, c, "slow")
	testkit.Eventually(t, 10*time.Second, "the flow waits for its instance", func() bool { return src.asked.Load() == 1 })
	time.Sleep(3 * idle) // the wake takes three idle_timeouts
	close(src.gate)
	if got, err := receive(c, 1, 10*time.Second); err != nil || got[0] != "slow" {
		t.Fatalf("the client got %q, %v; want its datagram answered after a wake longer than idle_timeout", got, err)
	}
	testkit.Eventually(t, lateAnswers+10*time.Second, "the flow ends", func() bool { return src.open.Load() == 0 })
}
