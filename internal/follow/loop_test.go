package follow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// ---- a made-up daemon on a fake clock -----------------------------------------

// fakeClock is the loop's time: it moves only when the loop waits or a
// scripted session says it lasted, and it records every wait.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	delays []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) bool {
	c.mu.Lock()
	c.delays = append(c.delays, d)
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err() == nil
}

func (c *fakeClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.delays...)
}

// step is how one scripted session goes.
type step struct {
	listed bool
	// lasts is how long the session runs after its listing.
	lasts time.Duration
	err   error
}

// fakeDaemon runs its script, one step a session; at the session after
// the last it cancels the loop's context.
type fakeDaemon struct {
	clock    *fakeClock
	script   []step
	n        int
	cancel   context.CancelFunc
	replaced chan struct{}
}

func (d *fakeDaemon) Connect(ctx context.Context, _ *zap.Logger) (Conn, error) {
	d.n++
	if d.n > len(d.script) {
		d.cancel()
		return nil, ctx.Err()
	}
	s := d.script[d.n-1]
	if !s.listed {
		return nil, s.err
	}
	return &fakeConn{d: d, step: s}, nil
}

// Explain takes the reason from the cause's text: "refused" is an Auth
// problem, "cut off" has its own warning, "no socket" is Unreachable.
func (d *fakeDaemon) Explain(err error) End { return testExplain(err) }

func testExplain(err error) End {
	if err == nil {
		return End{Reason: "session ended"}
	}
	call, cause := Call(err)
	e := End{Call: call, Reason: cause.Error()}
	e.Auth = strings.Contains(e.Reason, "refused")
	e.Unreachable = strings.Contains(e.Reason, "no socket")
	if strings.Contains(e.Reason, "cut off") {
		e.Lost = "fell behind the Test daemon: re-listing"
	}
	return e
}

type fakeConn struct {
	d    *fakeDaemon
	step step
}

func (c *fakeConn) Subscribe(ctx context.Context) (Stream, error) {
	return func(func(Event)) error {
		select {
		case <-c.d.replaced:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.d.clock.advance(c.step.lasts)
		return c.step.err
	}, nil
}

func (c *fakeConn) List(context.Context) (Listing, error) { return Listing{}, nil }

func (c *fakeConn) Fetch(context.Context, string) (catalog.Instance, error) {
	return catalog.Instance{}, ErrNotFound
}

func (c *fakeConn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

func (c *fakeConn) Close() error { return nil }

// signalSink says when a listing reached it.
type signalSink struct{ replaced chan struct{} }

func (s signalSink) Replace([]catalog.Instance) { s.replaced <- struct{}{} }
func (signalSink) Put(catalog.Instance)         {}
func (signalSink) Delete(string)                {}
func (signalSink) Stopping(string)              {}
func (signalSink) Started(string)               {}

// play runs script on the fake clock with pace and returns the waits
// between sessions and the logs.
func play(t *testing.T, pace Pace, script ...step) ([]time.Duration, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := newFakeClock()
	replaced := make(chan struct{}, 1)
	d := &fakeDaemon{clock: clock, script: script, cancel: cancel, replaced: replaced}
	l := &Loop{Daemon: d, Name: "Test daemon", Things: "boxes", Thing: "box", Pace: pace,
		clock: clock.now, sleep: clock.sleep}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, signalSink{replaced}, zap.New(core))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	return clock.waits(), logs
}

// within checks that each delay lies in [cap/2, cap] (the jitter) for the
// cap the pace gives it.
func within(t *testing.T, delays []time.Duration, caps ...time.Duration) {
	t.Helper()
	if len(delays) != len(caps) {
		t.Fatalf("%d delays %v, want %d", len(delays), delays, len(caps))
	}
	for i, c := range caps {
		if d := delays[i]; d < c/2 || d > c {
			t.Errorf("delay %d = %v, want within [%v, %v]; delays %v", i, d, c/2, c, delays)
		}
	}
}

func lines(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Level.String()+" "+e.Message+" ("+fmt.Sprint(e.ContextMap()["error"])+")")
	}
	return out
}

const ms = time.Millisecond

// ---- the two paces ---------------------------------------------------------------

// A daemon that keeps cutting the session off soon after each listing is
// re-listed ever less often, to the cap; one warning says so, the next
// cuts are logged at debug level; a session that lasts Stable starts the
// pace afresh and re-arms the warning.
func TestPaceRelistAfterCuts(t *testing.T) {
	cut := step{listed: true, lasts: time.Second, err: errors.New("cut off")}
	script := []step{cut, cut, cut, cut, cut, cut, cut, cut,
		{listed: true, lasts: time.Minute, err: errors.New("transport closing")},
		cut, cut, cut}
	delays, logs := play(t, Pace{Min: 100 * ms, Max: 1600 * ms, Stable: 10 * time.Second}, script...)
	within(t, delays,
		100*ms, 200*ms, 400*ms, 800*ms, 1600*ms, 1600*ms, 1600*ms, 1600*ms,
		100*ms, // the stable session started the pace afresh
		200*ms, 400*ms, 800*ms)
	var got []string
	for _, l := range lines(logs) {
		if !strings.HasPrefix(l, "info ") {
			got = append(got, l)
		}
	}
	keeps := "warn the Test daemon keeps ending the session soon after each listing: re-listing ever less often, until a session lasts 10s (cut off)"
	again := "debug the Test daemon ended the session soon after the listing again (cut off)"
	want := []string{
		"warn fell behind the Test daemon: re-listing (cut off)",
		keeps, again, again, again, again, again, again,
		"warn lost the Test daemon: still routing to the last known boxes, reconnecting (transport closing)",
		"warn fell behind the Test daemon: re-listing (cut off)",
		keeps, again,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := logs.FilterMessageSnippet("keeps ending").All()[0]; e.ContextMap()["max_retry_in"] != 1600*ms {
		t.Errorf("fields %v", e.ContextMap())
	}
}

// While the daemon cannot be reached, attempts follow the connect pace,
// capped at ConnectMax however long the outage lasts, so the daemon's
// return is noticed within ConnectMax; the re-list pace is left as it was.
func TestPaceConnectDuringOutage(t *testing.T) {
	down := step{err: errors.New("no socket")}
	cut := step{listed: true, lasts: time.Second, err: errors.New("cut off")}
	script := []step{cut, cut, cut}
	for range 80 { // 30 s and more of outage
		script = append(script, down)
	}
	script = append(script, cut)
	delays, _ := play(t, Pace{Min: 100 * ms, Max: 10 * time.Second, ConnectMax: 400 * ms, Stable: 10 * time.Second}, script...)
	caps := []time.Duration{100 * ms, 200 * ms, 400 * ms, 100 * ms, 200 * ms}
	for len(caps) < 3+80 {
		caps = append(caps, 400*ms)
	}
	caps = append(caps, 800*ms) // the re-list pace goes on where the cuts left it
	within(t, delays, caps...)
	var outage time.Duration
	for _, d := range delays[3 : 3+80] {
		outage += d
	}
	if outage < 15*time.Second {
		t.Fatalf("the outage lasted %v, want a long one", outage)
	}
}

// A daemon reached over TCP keeps the longer cap: without ConnectMax the
// connect pace grows to Max. A listing starts it afresh.
func TestPaceConnectWithoutConnectMax(t *testing.T) {
	down := step{err: errors.New("no socket")}
	ok := step{listed: true, lasts: time.Hour, err: errors.New("transport closing")}
	delays, _ := play(t, Pace{Min: 100 * ms, Max: 800 * ms}, down, down, down, down, down, ok, down)
	within(t, delays, 100*ms, 200*ms, 400*ms, 800*ms, 800*ms, 100*ms, 100*ms)
}

// A daemon that answers but fails or cuts the session off before the
// listing follows the re-list pace, not the connect pace: it costs the
// daemon as much as a cut after the listing.
func TestPaceFailureBeforeListing(t *testing.T) {
	failing := step{err: errors.New("INTERNAL: boom")}
	delays, _ := play(t, Pace{Min: 100 * ms, Max: 800 * ms, ConnectMax: 100 * ms}, failing, failing, failing, failing)
	within(t, delays, 100*ms, 200*ms, 400*ms, 800*ms)
}

// Defaults: 250ms to 15s, a stable session is 30s, and ConnectMax is at
// most Max.
func TestPaceDefaults(t *testing.T) {
	p := Pace{}.withDefaults()
	if p.Min != 250*ms || p.Max != 15*time.Second || p.ConnectMax != p.Max || p.Stable != 30*time.Second {
		t.Fatalf("defaults %+v", p)
	}
	if p := (Pace{Min: 20 * ms, Max: 200 * ms, ConnectMax: LocalConnectMax}).withDefaults(); p.ConnectMax != 200*ms {
		t.Fatalf("ConnectMax above Max: %+v", p)
	}
}

// ---- logs ----------------------------------------------------------------------

func testLoop(log *zap.Logger) *Loop {
	return &Loop{Daemon: &fakeDaemon{}, Name: "Test daemon", Things: "boxes", Thing: "box", logger: log}
}

// A daemon that stays down is reported once at error level per distinct
// reason, then at debug level, until a listing succeeds.
func TestLogEndDedupes(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	o := &outage{logged: map[string]bool{}}
	down := func(err error) { l.logEnd(testExplain(err), false, time.Second, o) }
	refused := WrapCall("GetEvents", errors.New("UNAVAILABLE: connection refused"))
	for range 5 {
		down(refused)
	}
	down(WrapCall("GetEvents", errors.New("the daemon refused the token")))
	down(refused)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 2 {
		t.Fatalf("%d error entries, want 2 (one per distinct reason): %v", n, logs.All())
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).Len(); n != 5 {
		t.Fatalf("%d debug entries, want 5", n)
	}
	e := logs.FilterLevelExact(zapcore.ErrorLevel).All()[1]
	if got := e.ContextMap()["error"]; got != "the daemon refused the token" {
		t.Fatalf("error field %q", got)
	}
	if got := e.ContextMap()["call"]; got != "GetEvents" {
		t.Fatalf("call field %q", got)
	}
	if got := e.ContextMap()["retry_in"]; got != time.Second {
		t.Fatalf("retry_in field %v", got)
	}
	for _, e := range logs.All() {
		if e.Level == zapcore.ErrorLevel && e.Message != "cannot follow the Test daemon: none of its boxes are routed to until this is fixed" ||
			e.Level == zapcore.DebugLevel && e.Message != "still cannot follow the Test daemon" {
			t.Fatalf("%s %q", e.Level, e.Message)
		}
	}
	listed := func(err error) {
		l.logEnd(testExplain(err), true, time.Second, &outage{logged: map[string]bool{}, cuts: 1})
	}
	// A session that had listed and then lost the stream is a warning.
	logs.TakeAll()
	listed(WrapCall("GetEvents", errors.New("UNAVAILABLE: transport closing")))
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.WarnLevel ||
		e[0].Message != "lost the Test daemon: still routing to the last known boxes, reconnecting" {
		t.Fatalf("lost stream after listing: %v", e)
	}
	// The adapter may word that warning itself.
	listed(WrapCall("GetEvents", errors.New("cut off")))
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.WarnLevel || e[0].Message != "fell behind the Test daemon: re-listing" {
		t.Fatalf("cut off after listing: %v", e)
	}
	// A refusal is an error even after a listing, which no reconnection
	// fixes; the last known boxes are still routed to.
	listed(errors.New("refused"))
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.ErrorLevel ||
		e[0].Message != "cannot follow the Test daemon: still routing to the boxes it last reported" || e[0].ContextMap()["call"] != nil {
		t.Fatalf("refused after listing: %v", e)
	}
}

// The set of reasons already logged is bounded: past maxLoggedReasons it
// starts afresh, so a reason is logged at error level again.
func TestLogEndBoundsReasons(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	o := &outage{logged: map[string]bool{}}
	for i := range maxLoggedReasons {
		l.logEnd(End{Reason: fmt.Sprint("reason ", i)}, false, time.Second, o)
	}
	l.logEnd(End{Reason: "reason 0"}, false, time.Second, o)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != maxLoggedReasons || len(o.logged) != maxLoggedReasons {
		t.Fatalf("%d error entries, %d reasons kept; want %d", n, len(o.logged), maxLoggedReasons)
	}
	l.logEnd(End{Reason: "one more"}, false, time.Second, o)
	if len(o.logged) != 1 {
		t.Fatalf("%d reasons kept past the bound, want 1", len(o.logged))
	}
	l.logEnd(End{Reason: "reason 0"}, false, time.Second, o)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != maxLoggedReasons+2 {
		t.Fatalf("%d error entries, want %d", n, maxLoggedReasons+2)
	}
}

// Run runs sessions until its context is done; a listing ends the outage,
// so a reason logged before it is logged at error level again, and the
// sessions after the first listing say they reconnected.
func TestRun(t *testing.T) {
	down := errors.New("connection refused")
	_, logs := play(t, Pace{Min: ms, Max: 4 * ms, Stable: time.Minute},
		step{err: down},
		step{err: down},
		step{listed: true, lasts: time.Hour, err: errors.New("transport closing")},
		step{err: down},
		step{err: down},
		step{listed: true, lasts: time.Hour},
	)
	wantLogs := []string{
		"error cannot follow the Test daemon: none of its boxes are routed to until this is fixed (connection refused)",
		"debug still cannot follow the Test daemon (connection refused)",
		"info connected to the Test daemon (<nil>)",
		"warn lost the Test daemon: still routing to the last known boxes, reconnecting (transport closing)",
		"error cannot follow the Test daemon: still routing to the boxes it last reported (connection refused)",
		"debug still cannot follow the Test daemon (connection refused)",
		"info reconnected to the Test daemon (<nil>)",
		"warn lost the Test daemon: still routing to the last known boxes, reconnecting (session ended)",
	}
	if got := lines(logs); strings.Join(got, "\n") != strings.Join(wantLogs, "\n") {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLogs, "\n"))
	}
	if e := logs.FilterMessage("connected to the Test daemon").All()[0]; e.ContextMap()["boxes"] != int64(0) {
		t.Errorf("connected fields %v", e.ContextMap())
	}
}

// Run returns while waiting out a long delay once its context is done,
// without logging the session that the cancellation ended.
func TestRunStopsDuringBackoff(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempts := make(chan struct{}, 10)
	log := l.logger
	l.Daemon = connectFunc(func(context.Context) (Conn, error) {
		attempts <- struct{}{}
		return nil, errors.New("down")
	})
	l.Pace = Pace{Min: time.Hour, Max: time.Hour}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, signalSink{}, log)
	}()
	<-attempts
	// Its failure is logged once the attempt returns: cancel in the
	// backoff after it, not while the attempt ends.
	for deadline := time.Now().Add(10 * time.Second); logs.Len() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed attempt was never logged")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return during its backoff")
	}
	if len(attempts) != 0 {
		t.Fatal("a second session ran")
	}
	if e := logs.All(); len(e) != 1 || e[0].Level != zapcore.ErrorLevel {
		t.Fatalf("logs %v", e)
	}
	// A session ended by the cancellation is not logged.
	ctx2, cancel2 := context.WithCancel(context.Background())
	l.Daemon = connectFunc(func(ctx context.Context) (Conn, error) {
		cancel2()
		return nil, ctx.Err()
	})
	logs.TakeAll()
	l.Run(ctx2, signalSink{}, log)
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d logs for a session ended by the cancellation", n)
	}
}

// connectFunc is a daemon that is only its Connect.
type connectFunc func(ctx context.Context) (Conn, error)

func (f connectFunc) Connect(ctx context.Context, _ *zap.Logger) (Conn, error) { return f(ctx) }
func (connectFunc) Explain(err error) End                                      { return testExplain(err) }

// Pace.Check refuses a negative setting.
func TestPaceCheck(t *testing.T) {
	if err := (Pace{}).Check(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Pace{{Min: -1}, {Max: -1}, {ConnectMax: -1}, {Stable: -1}} {
		if err := p.Check(); err == nil || err.Error() != "backoff: must not be negative" {
			t.Errorf("Check(%+v) = %v", p, err)
		}
	}
}

// Key is a hash: equal settings, equal keys; any difference, even in where
// one setting ends, another key.
func TestKey(t *testing.T) {
	if Key("a", "b") != Key("a", "b") || len(Key("a")) != 64 {
		t.Fatal("unstable key")
	}
	if Key("a", "b") == Key("ab") || Key("a", "b") == Key("a", "c") {
		t.Fatal("different settings share a key")
	}
}
