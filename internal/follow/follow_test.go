package follow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestBackoff(t *testing.T) {
	b := NewBackoff(0, 0)
	if b.min != DefaultMinBackoff || b.max != DefaultMaxBackoff {
		t.Fatalf("defaults %v..%v, want %v..%v", b.min, b.max, DefaultMinBackoff, DefaultMaxBackoff)
	}
	if DefaultMinBackoff != 250*time.Millisecond || DefaultMaxBackoff != 15*time.Second {
		t.Fatalf("defaults %v..%v, want 250ms..15s", DefaultMinBackoff, DefaultMaxBackoff)
	}
	b = NewBackoff(100*time.Millisecond, time.Second)
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		if d := b.Next(); d < c/2 || d > c {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, d, c/2, c)
		}
	}
	b.Reset()
	if d := b.Next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after reset: %v, want within [50ms, 100ms]", d)
	}
	// Many steps never overflow past the cap.
	for range 200 {
		if d := b.Next(); d <= 0 || d > time.Second {
			t.Fatalf("delay %v out of bounds", d)
		}
	}
	// max below min is raised to min.
	if b := NewBackoff(time.Second, time.Millisecond); b.max != time.Second {
		t.Fatalf("max %v, want raised to min", b.max)
	}
}

// expectOneNotify checks that p has exactly one notification pending.
func expectOneNotify(t *testing.T, p *Pending) {
	t.Helper()
	select {
	case <-p.Notify():
	default:
		t.Fatal("no notification")
	}
	select {
	case <-p.Notify():
		t.Fatal("more than one pending notification")
	default:
	}
}

func TestPendingCoalesces(t *testing.T) {
	p := NewPending()
	for range 100 {
		p.Add("a", false)
	}
	p.Add("b", false)
	p.Add("c", false)
	p.Add("c", true) // deleted
	p.Flag()
	expectOneNotify(t, p)
	ids, flagged := p.Take()
	if len(ids) != 3 || ids["a"] || ids["b"] || !ids["c"] || !flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	if ids, flagged := p.Take(); len(ids) != 0 || flagged {
		t.Fatalf("second take = %v, %v, want empty", ids, flagged)
	}
}

// A deletion sticks: IDs are never reused, and an event that follows the
// deletion (a network disconnect after a destroy) does not undo it.
func TestPendingDeletedSticks(t *testing.T) {
	p := NewPending()
	for range 100 {
		p.Add("a", false)
	}
	p.Add("b", false)
	p.Add("c", true)
	p.Add("c", false) // a disconnect after the destroy: still destroyed
	expectOneNotify(t, p)
	ids, flagged := p.Take()
	if len(ids) != 3 || ids["a"] || ids["b"] || !ids["c"] || flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	if ids, _ := p.Take(); len(ids) != 0 {
		t.Fatalf("second take = %v, want empty", ids)
	}
	// Once taken, the ID starts afresh.
	p.Add("c", false)
	if ids, _ := p.Take(); len(ids) != 1 || ids["c"] {
		t.Fatalf("take after the deletion was taken = %v", ids)
	}
}

// A flag alone notifies, and a notification taken before the Add is
// followed by another.
func TestPendingFlagNotifies(t *testing.T) {
	p := NewPending()
	p.Flag()
	expectOneNotify(t, p)
	if ids, flagged := p.Take(); len(ids) != 0 || !flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	p.Add("a", false)
	expectOneNotify(t, p)
}

// Adds from one goroutine while another takes lose nothing.
func TestPendingConcurrent(t *testing.T) {
	p := NewPending()
	const n = 1000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			p.Add(fmt.Sprint(i), i%2 == 0)
		}
	}()
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-p.Notify():
		case <-done:
			finished = true
		}
		ids, _ := p.Take()
		for id, deleted := range ids {
			seen[id] = deleted
		}
	}
	if len(seen) != n {
		t.Fatalf("%d IDs taken, want %d", len(seen), n)
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != (i%2 == 0) {
			t.Fatalf("ID %d deleted = %v", i, seen[fmt.Sprint(i)])
		}
	}
}

func TestWrapCall(t *testing.T) {
	if err := WrapCall("GetEvents", nil); err != nil {
		t.Fatalf("WrapCall(nil) = %v, want nil", err)
	}
	err := WrapCall("GetEvents", io.EOF)
	if err.Error() != "GetEvents: EOF" || !errors.Is(err, io.EOF) {
		t.Fatalf("WrapCall = %q, errors.Is(EOF) = %v", err, errors.Is(err, io.EOF))
	}
	if call, cause := Call(fmt.Errorf("session: %w", err)); call != "GetEvents" || !errors.Is(cause, io.EOF) || cause.Error() != "EOF" {
		t.Fatalf("Call(wrapped) = %q, %v", call, cause)
	}
	boom := errors.New("boom")
	if call, cause := Call(boom); call != "" || !errors.Is(cause, boom) || cause.Error() != "boom" {
		t.Fatalf("Call(unwrapped) = %q, %v", call, cause)
	}
	if call, cause := Call(nil); call != "" || cause != nil {
		t.Fatalf("Call(nil) = %q, %v", call, cause)
	}
}

// testLoop is a Loop for a made-up daemon whose Explain takes the reason
// from the cause's text; "refused" is an Auth problem, "cut off" has its
// own warning.
func testLoop(log *zap.Logger) *Loop {
	return &Loop{
		Daemon: "Test daemon",
		Things: "boxes",
		Log:    log,
		Explain: func(err error) End {
			if err == nil {
				return End{Reason: "session ended"}
			}
			call, cause := Call(err)
			e := End{Call: call, Reason: cause.Error()}
			e.Auth = strings.Contains(e.Reason, "refused")
			if strings.Contains(e.Reason, "cut off") {
				e.Lost = "fell behind the Test daemon: re-listing"
			}
			return e
		},
	}
}

// A daemon that stays down is reported once at error level per distinct
// reason, then at debug level, until a listing succeeds.
func TestLogEndDedupes(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	logged := map[string]bool{}
	down := func(err error) { l.logEnd(l.Explain(err), false, false, time.Second, logged) }
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
	// A session that had listed and then lost the stream is a warning.
	logs.TakeAll()
	l.logEnd(l.Explain(WrapCall("GetEvents", errors.New("UNAVAILABLE: transport closing"))), true, true, time.Second, map[string]bool{})
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.WarnLevel ||
		e[0].Message != "lost the Test daemon: still routing to the last known boxes, reconnecting" {
		t.Fatalf("lost stream after listing: %v", e)
	}
	// The adapter may word that warning itself.
	l.logEnd(l.Explain(WrapCall("GetEvents", errors.New("cut off"))), true, true, time.Second, map[string]bool{})
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.WarnLevel || e[0].Message != "fell behind the Test daemon: re-listing" {
		t.Fatalf("cut off after listing: %v", e)
	}
	// A refusal is an error even after a listing, which no reconnection
	// fixes; the last known boxes are still routed to.
	l.logEnd(l.Explain(errors.New("refused")), true, true, time.Second, map[string]bool{})
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
	logged := map[string]bool{}
	for i := range maxLoggedReasons {
		l.logEnd(End{Reason: fmt.Sprint("reason ", i)}, false, false, time.Second, logged)
	}
	l.logEnd(End{Reason: "reason 0"}, false, false, time.Second, logged)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != maxLoggedReasons || len(logged) != maxLoggedReasons {
		t.Fatalf("%d error entries, %d reasons kept; want %d", n, len(logged), maxLoggedReasons)
	}
	l.logEnd(End{Reason: "one more"}, false, false, time.Second, logged)
	if len(logged) != 1 {
		t.Fatalf("%d reasons kept past the bound, want 1", len(logged))
	}
	l.logEnd(End{Reason: "reason 0"}, false, false, time.Second, logged)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != maxLoggedReasons+2 {
		t.Fatalf("%d error entries, want %d", n, maxLoggedReasons+2)
	}
}

type result struct {
	listed bool
	err    error
}

// Run runs sessions until its context is done: reconnect says whether a
// session had listed before; a listing resets the backoff and ends the
// outage, so a reason logged before it is logged at error level again.
func TestRun(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	down := errors.New("connection refused")
	results := []result{
		{false, down},
		{false, down},
		{true, errors.New("transport closing")},
		{false, down},
		{false, down},
		{true, nil},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reconnects []bool
	l.Session = func(ctx context.Context, reconnect bool) (bool, error) {
		reconnects = append(reconnects, reconnect)
		if len(reconnects) > len(results) {
			cancel()
			<-ctx.Done()
			return false, ctx.Err()
		}
		r := results[len(reconnects)-1]
		return r.listed, r.err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, NewBackoff(time.Millisecond, 4*time.Millisecond))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	want := []bool{false, false, false, true, true, true, true}
	if fmt.Sprint(reconnects) != fmt.Sprint(want) {
		t.Fatalf("reconnect = %v, want %v", reconnects, want)
	}
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+" "+e.Message+" ("+fmt.Sprint(e.ContextMap()["error"])+")")
	}
	wantLogs := []string{
		"error cannot follow the Test daemon: none of its boxes are routed to until this is fixed (connection refused)",
		"debug still cannot follow the Test daemon (connection refused)",
		"warn lost the Test daemon: still routing to the last known boxes, reconnecting (transport closing)",
		"error cannot follow the Test daemon: still routing to the boxes it last reported (connection refused)",
		"debug still cannot follow the Test daemon (connection refused)",
		"warn lost the Test daemon: still routing to the last known boxes, reconnecting (session ended)",
	}
	if strings.Join(got, "\n") != strings.Join(wantLogs, "\n") {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLogs, "\n"))
	}
}

// Run returns while waiting out a long backoff once its context is done,
// without logging the session that the cancellation ended.
func TestRunStopsDuringBackoff(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := testLoop(zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := make(chan struct{}, 10)
	l.Session = func(ctx context.Context, _ bool) (bool, error) {
		sessions <- struct{}{}
		return false, errors.New("down")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, NewBackoff(time.Hour, time.Hour))
	}()
	<-sessions
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return during its backoff")
	}
	if len(sessions) != 0 {
		t.Fatal("a second session ran")
	}
	if e := logs.All(); len(e) != 1 || e[0].Level != zapcore.ErrorLevel {
		t.Fatalf("logs %v", e)
	}
	// A session ended by the cancellation is not logged.
	ctx2, cancel2 := context.WithCancel(context.Background())
	l.Session = func(ctx context.Context, _ bool) (bool, error) {
		cancel2()
		return true, ctx.Err()
	}
	logs.TakeAll()
	l.Run(ctx2, NewBackoff(0, 0))
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d logs for a session ended by the cancellation", n)
	}
}
