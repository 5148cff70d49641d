package readiness

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// dialCounter wraps a Prober's dial to count attempts and sockets in
// flight.
type dialCounter struct {
	inFlight, peak, total atomic.Int64
	mu                    sync.Mutex
	byAddr                map[string]int
	next                  func(ctx context.Context, addr string) error
}

func countDials(p *Prober) *dialCounter {
	d := &dialCounter{byAddr: map[string]int{}, next: p.dial}
	p.dial = d.dial
	return d
}

func (d *dialCounter) dial(ctx context.Context, addr string) error {
	n := d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	for peak := d.peak.Load(); n > peak && !d.peak.CompareAndSwap(peak, n); peak = d.peak.Load() {
	}
	d.total.Add(1)
	d.mu.Lock()
	d.byAddr[addr]++
	d.mu.Unlock()
	return d.next(ctx, addr)
}

func (d *dialCounter) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byAddr[addr]
}

// R1b: 10,000 instances that never accept, some on a port that refuses,
// some on one whose listen backlog is full (its SYNs dropped: each attempt
// waits for its timeout), keep at most MaxDials sockets in flight and a
// few goroutines; each is tried, and retried.
func TestProbe_R1b_sockets_in_flight_stay_under_MaxDials(t *testing.T) {
	refused := closedPort(t)
	silent := fullBacklog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSink()
	p := New(ctx, time.Minute, time.Millisecond, s.ready, nil)
	dials := countDials(p)
	g := newGoroutinePeak()
	for i := range crowd {
		addr := refused
		if i%200 == 0 {
			addr = silent
		}
		// Unique addresses, the same socket: count each instance's tries.
		p.Probe(catalog.ProbeRequest{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("i-", i), Dials: []string{addr}, Gen: 1})
		g.sample(t)
	}
	idle := p.Idle()
	deadline := time.After(time.Minute)
	for waiting := true; waiting || dials.total.Load() < crowd+crowd/5; {
		select {
		case <-idle:
			waiting = false
		case <-deadline:
			t.Fatalf("after a minute: %d attempts, idle %v", dials.total.Load(), !waiting)
		case <-time.After(time.Millisecond): // sample meanwhile
		}
		g.sample(t)
	}
	if peak := dials.peak.Load(); peak > MaxDials {
		t.Errorf("%d attempts in flight at once, want at most %d", peak, MaxDials)
	}
	if n := dials.count(silent); n < crowd/200 {
		t.Errorf("%d attempts on the silent port, want one at least for each of its %d instances", n, crowd/200)
	}
	if v := s.all(); len(v) != 0 {
		t.Fatalf("%d verdicts before the timeout, first %+v", len(v), v[0])
	}
	cancel()
	p.Wait()
	g.settleGoroutines(t)
	t.Logf("%d attempts, at most %d in flight and %d goroutines, for %d instances", dials.total.Load(), dials.peak.Load(), g.peak, crowd)
}

// R1b: with 10,000 instances that never accept pending, an instance that
// accepts at once is decided first, and one whose port opens after its
// first attempt is found by a retry, well before any of the others'
// timeouts.
func TestProbe_R1b_new_instances_first_amid_never_ready_ones(t *testing.T) {
	refused := closedPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSink()
	p := New(ctx, time.Minute, time.Millisecond, s.ready, nil)
	dials := countDials(p)
	for i := range crowd {
		p.Probe(catalog.ProbeRequest{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("i-", i), Dials: []string{refused}, Gen: 1})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p.Probe(catalog.ProbeRequest{ID: "id-new", Name: "new", Dials: []string{ln.Addr().String()}, Gen: 2})
	if v := s.awaitID(t, "id-new"); !v.accepted {
		t.Fatalf("verdict %+v, want accepted", v)
	}

	late := closedPort(t)
	p.Probe(catalog.ProbeRequest{ID: "id-late", Name: "late", Dials: []string{late}, Gen: 3})
	deadline := time.Now().Add(time.Minute)
	for dials.count(late) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("late was not tried within a minute")
		}
		time.Sleep(time.Millisecond) // poll the condition
	}
	ln2, err := net.Listen("tcp", late)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if v := s.awaitID(t, "id-late"); !v.accepted {
		t.Fatalf("verdict %+v, want accepted", v)
	}
	for _, v := range s.all() {
		if v.id != "id-new" && v.id != "id-late" {
			t.Fatalf("verdict %+v before id-new and id-late's", v)
		}
	}
	t.Logf("late found after %d attempts on it", dials.count(late))
}

// R1b: each instance that never accepts gets one warning, naming it, at its
// timeout, whatever its number of attempts.
func TestProbe_R1b_one_warning_per_instance(t *testing.T) {
	const n = 300
	refused := closedPort(t)
	core, logs := observer.New(zapcore.WarnLevel)
	s := newSink()
	p := New(context.Background(), 200*time.Millisecond, time.Millisecond, s.ready, zap.New(core))
	dials := countDials(p)
	for i := range n {
		p.Probe(catalog.ProbeRequest{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("i-", i), Dials: []string{refused}, Gen: 1})
	}
	p.Wait()
	if got := s.all(); len(got) != n {
		t.Fatalf("%d verdicts, want %d", len(got), n)
	}
	named := map[any]int{}
	for _, e := range logs.All() {
		named[e.ContextMap()["instance"]]++
	}
	for i := range n {
		if c := named[fmt.Sprint("i-", i)]; c != 1 {
			t.Fatalf("instance i-%d warned %d times, want once", i, c)
		}
	}
	if len(logs.All()) != n {
		t.Fatalf("%d warnings, want %d", len(logs.All()), n)
	}
	for _, v := range s.all() {
		if v.accepted {
			t.Fatalf("verdict %+v, want not accepted", v)
		}
	}
	t.Logf("%d attempts for %d instances", dials.total.Load(), n)
}

// A request with the Gen of the probe under way is the same request: one
// verdict.
func TestProbe_same_request_twice_is_one_probe(t *testing.T) {
	ch, ready := recorder()
	p := New(context.Background(), 10*time.Second, time.Millisecond, ready, nil)
	addr := closedPort(t)
	r := catalog.ProbeRequest{ID: "id-f", Name: "f", Dials: []string{addr}, Gen: 4}
	p.Probe(r)
	p.Probe(r)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	await(t, ch)
	p.Wait()
	noVerdict(t, ch, 20*time.Millisecond)
}

// The pace of one probe: the interval at first, then a tenth of the time
// since it started, at most 5 ms, during its first second; a fifth of it,
// at most MaxInterval, after.
func TestProbe_pause_backs_off(t *testing.T) {
	p := New(context.Background(), 0, 0, nil, nil)
	for _, c := range []struct{ elapsed, want time.Duration }{
		{0, DefaultInterval},
		{4 * time.Millisecond, DefaultInterval},
		{20 * time.Millisecond, 2 * time.Millisecond},
		{50 * time.Millisecond, 5 * time.Millisecond},
		{999 * time.Millisecond, 5 * time.Millisecond},
		{2 * time.Second, 400 * time.Millisecond},
		{time.Hour, MaxInterval},
	} {
		if got := p.pause(c.elapsed); got != c.want {
			t.Errorf("pause after %s: %s, want %s", c.elapsed, got, c.want)
		}
	}
}

// Idle is closed while no probe waits for its first attempt: open while
// the first attempt runs, closed once it has failed though the probe goes
// on (R1b: the first listing does not wait for instances that do not
// accept at once), and the verdict still comes when the port opens.
func TestProbe_idle_after_first_attempts(t *testing.T) {
	ch, ready := recorder()
	p := New(context.Background(), 10*time.Second, time.Millisecond, ready, nil)
	select {
	case <-p.Idle():
	default:
		t.Fatal("a new prober is not idle")
	}
	addr := closedPort(t)
	release := make(chan struct{})
	first := true
	p.dial = func(ctx context.Context, a string) error {
		if first {
			first = false
			<-release
		}
		return p.dialTCP(ctx, a)
	}
	p.Probe(catalog.ProbeRequest{ID: "id-e", Name: "e", Dials: []string{addr}, Gen: 1})
	idle := p.Idle()
	select {
	case <-idle:
		t.Fatal("idle while the first attempt runs")
	default:
	}
	close(release)
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("not idle after the first attempt failed")
	}
	noVerdict(t, ch, 20*time.Millisecond)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if v := await(t, ch); !v.accepted {
		t.Fatalf("verdict %+v, want accepted", v)
	}
	p.Wait()
}
