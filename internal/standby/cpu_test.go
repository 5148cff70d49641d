package standby

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// cpuActions are fakeActions that also read a container's CPU: a
// container uses busy cores (per mille of one) while busy says so.
type cpuActions struct {
	fakeActions
	mu      sync.Mutex
	used    map[string]time.Duration
	at      map[string]time.Time
	busy    func(id string) float64 // cores in use now
	reads   atomic.Int32
	inside  atomic.Int32 // reads in flight
	peak    atomic.Int32
	block   chan struct{} // nil: answer at once
	readErr error
}

func (c *cpuActions) CPU(ctx context.Context, id string, labels map[string]string) (CPUSample, error) {
	if _, ok := labels[catalog.LabelStandbyCPU]; !ok {
		return CPUSample{}, errors.New("not labelled")
	}
	c.reads.Add(1)
	n := c.inside.Add(1)
	defer c.inside.Add(-1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
			return CPUSample{}, ctx.Err()
		}
	}
	if c.readErr != nil {
		return CPUSample{}, c.readErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.used == nil {
		c.used, c.at = map[string]time.Duration{}, map[string]time.Time{}
	}
	prevAt, prevUsed := c.at[id], c.used[id]
	if prevAt.IsZero() {
		prevAt = now.Add(-time.Second)
	}
	used := prevUsed + time.Duration(float64(now.Sub(prevAt))*c.busy(id))
	c.used[id], c.at[id] = used, now
	// The Engine's own previous sample: a second before, at the same pace.
	return CPUSample{Used: used, At: now, PrevUsed: used - time.Duration(float64(time.Second)*c.busy(id)),
		PrevAt: now.Add(-time.Second)}, nil
}

// cpuSleeper is a running container labelled caddy.standby_after=after
// and caddy.standby_cpu=50, serving host.
func cpuSleeper(host string, after time.Duration) catalog.Instance {
	in := sleeperFor(host, catalog.StateRunning)
	in.Labels[catalog.LabelStandbyAfter] = after.String()
	in.Labels[catalog.LabelStandbyCPU] = "50"
	return in
}

// served routes one request to host's instance and ends it.
func served(t *testing.T, w *Waker, cat *catalog.Catalog, host string) {
	t.Helper()
	ts := cat.Snapshot().Targets(nil, catalog.Route{Port: 8080}, host)
	if len(ts) != 1 || ts[0].Activity == nil {
		t.Fatalf("targets of %s: %v", host, ts)
	}
	w.Routed(ts[0].Activity, ts[0].Dial)
}

// R5r: the CPU over the time since the last look when that is within the
// window, else over the Engine's last second; none without a time.
func TestCPUPercent_R5r_window(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cur := CPUSample{Used: 10 * time.Second, At: t0.Add(4 * time.Second), PrevUsed: 9900 * time.Millisecond, PrevAt: t0.Add(3 * time.Second)}
	prev := CPUSample{Used: 8 * time.Second, At: t0}
	if pct, over, ok := CPUPercent(prev, cur, 5*time.Second); !ok || pct != 50 || over != 4*time.Second {
		t.Errorf("since the last look: %v%% over %s (%v), want 50%% over 4s", pct, over, ok)
	}
	if pct, over, ok := CPUPercent(prev, cur, 3*time.Second); !ok || pct != 10 || over != time.Second {
		t.Errorf("last look past the window: %v%% over %s (%v), want the Engine's 10%% over 1s", pct, over, ok)
	}
	restarted := CPUSample{Used: time.Second, At: t0.Add(2 * time.Second)}
	if _, _, ok := CPUPercent(CPUSample{Used: 5 * time.Second, At: t0}, restarted, time.Minute); ok {
		t.Error("a restarted container (less CPU time than before) with no Engine sample gave a figure")
	}
	if pct, _, ok := CPUPercent(CPUSample{}, CPUSample{Used: 3 * time.Second, At: t0, PrevUsed: time.Second, PrevAt: t0.Add(-time.Second)}, time.Minute); !ok || pct != 200 {
		t.Errorf("two cores busy: %v%% (%v), want 200%%", pct, ok)
	}
}

// R5r: an idle container (no request for standby_after) that keeps its
// CPU above caddy.standby_cpu is not stopped, for twice standby_after and
// more; once its CPU falls it is stopped within standby_after.
func TestStandby_R5r_cpu_keeps_a_busy_instance_awake(t *testing.T) {
	var burning atomic.Bool
	burning.Store(true)
	f := &cpuActions{busy: func(string) float64 {
		if burning.Load() {
			return 1
		}
		return 0.01
	}}
	stopped := make(chan time.Time, 1)
	f.then = func(action, _ string) error {
		if action == "stop" {
			stopped <- time.Now()
		}
		return nil
	}
	const after = 4 * time.Second
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := Join(ctx, NewEngine(f), cat, zap.NewNop(), Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	cat.Replace([]catalog.Instance{cpuSleeper("busy", after)})
	served(t, w, cat, "busy")
	last := time.Now()
	select {
	case at := <-stopped:
		t.Fatalf("stopped %s after its last request while its CPU was above caddy.standby_cpu", at.Sub(last).Round(time.Millisecond))
	case <-time.After(2 * after):
	}
	if f.reads.Load() == 0 {
		t.Fatal("its CPU was never read")
	}
	burning.Store(false)
	fell := time.Now()
	select {
	case at := <-stopped:
		t.Logf("stopped %s after its CPU fell; %d reads", at.Sub(fell).Round(time.Millisecond), f.reads.Load())
		if at.Sub(fell) > after {
			t.Errorf("stopped %s after its CPU fell, want within standby_after (%s)", at.Sub(fell), after)
		}
	case <-time.After(3 * after):
		t.Fatal("not stopped once its CPU fell")
	}
}

// R5r: a container without caddy.standby_cpu is never read, and one whose
// read fails goes on standby as if unlabelled, warned once per Engine.
func TestStandby_R5r_unlabelled_not_read_and_a_failed_read_stops(t *testing.T) {
	f := &cpuActions{busy: func(string) float64 { return 1 }, readErr: errors.New("stats refused")}
	var stops atomic.Int32
	f.then = func(action, _ string) error {
		if action == "stop" {
			stops.Add(1)
		}
		return nil
	}
	core, logs := observer.New(zapcore.InfoLevel)
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := Join(ctx, NewEngine(f), cat, zap.New(core), Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	plain := sleeperFor("plain", catalog.StateRunning)
	plain.Labels[catalog.LabelStandbyAfter] = "200ms"
	a, b := cpuSleeper("a", 200*time.Millisecond), cpuSleeper("b", 200*time.Millisecond)
	cat.Replace([]catalog.Instance{plain, a, b})
	for _, h := range []string{"plain", "a", "b"} {
		served(t, w, cat, h)
	}
	for deadline := time.Now().Add(5 * time.Second); stops.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 stopped", stops.Load())
		}
		time.Sleep(10 * time.Millisecond) // poll the condition
	}
	if n := f.reads.Load(); n != 2 {
		t.Errorf("%d CPU reads, want 2 (the labelled ones, once each)", n)
	}
	if n := logs.FilterMessageSnippet("cannot read the CPU").Len(); n != 1 {
		t.Errorf("%d warnings of a failed read, want 1 per Engine", n)
	}
}

// R5r: a tenant's labels cannot make Caddy read stats without bound: 40
// containers due at once, their reads stuck, make at most maxCPUReads
// reads at once; while stuck, the others are kept awake unread, and each
// container is read no more than once per cpuRecheck.
func TestStandby_R5r_cpu_reads_bounded(t *testing.T) {
	f := &cpuActions{busy: func(string) float64 { return 1 }, block: make(chan struct{})}
	f.then = func(string, string) error { return nil }
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := Join(ctx, NewEngine(f), cat, zap.NewNop(), Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	var insts []catalog.Instance
	for i := range 40 {
		insts = append(insts, cpuSleeper(fmt.Sprintf("t%02d", i), 100*time.Millisecond))
	}
	cat.Replace(insts)
	for i := range 40 {
		served(t, w, cat, fmt.Sprintf("t%02d", i))
	}
	time.Sleep(time.Second) // every container due ten times over: reads pile up if unbounded
	if p := f.peak.Load(); p > maxCPUReads {
		t.Errorf("%d CPU reads at once, want at most %d", p, maxCPUReads)
	}
	if n := f.reads.Load(); n != maxCPUReads {
		t.Errorf("%d reads begun while %d were stuck, want %d", n, maxCPUReads, maxCPUReads)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d stop calls while the reads could not tell", n)
	}
	close(f.block) // every read answers: all busy
	time.Sleep(2500 * time.Millisecond)
	// In 2.5 s after the reads free up, each container is read at most
	// 1 + 2.5s/cpuRecheck(100ms) = 1 + 2.5 = 3 times, and kept awake.
	if n := f.reads.Load(); n > maxCPUReads+40*3 {
		t.Errorf("%d reads of 40 busy containers in 2.5 s, want at most %d (one per cpuRecheck each)", n, maxCPUReads+40*3)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d stop calls of busy containers", n)
	}
}

// R5r: a read that times out (a slow Engine) cuts nothing: the container
// is kept awake until its next look, and read again then.
func TestStandby_R5r_a_read_that_times_out_keeps_it_awake(t *testing.T) {
	f := &cpuActions{busy: func(string) float64 { return 1 }, readErr: fmt.Errorf("stats: %w", context.DeadlineExceeded)}
	f.then = func(string, string) error { return nil }
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := Join(ctx, NewEngine(f), cat, zap.NewNop(), Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	cat.Replace([]catalog.Instance{cpuSleeper("slow", 200*time.Millisecond)})
	served(t, w, cat, "slow")
	for deadline := time.Now().Add(5 * time.Second); f.reads.Load() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads, want a second one at the next look", f.reads.Load())
		}
		time.Sleep(10 * time.Millisecond) // poll the condition
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d stop calls after reads that timed out", n)
	}
}
