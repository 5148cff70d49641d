package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// version is what one version's instances do: their error rate (0 to 1)
// and latency.
type version struct {
	errRate float64
	latency time.Duration
	errAcc  float64
	c       Counters
}

// serve answers n requests.
func (v *version) serve(n int) {
	for range n {
		v.errAcc += v.errRate
		status := 200
		if v.errAcc >= 1 {
			v.errAcc--
			status = 500
		}
		v.c.Record(status, v.latency)
	}
}

func (v *version) total() Sample {
	var s Sample
	v.c.AddTo(&s)
	return s
}

// sim drives a rollout second by second at rps requests a second, split
// by the state's share, as the decider would.
type sim struct {
	t        *testing.T
	cfg      Config
	st       State
	w        Window
	now      time.Time
	old, new *version
	changes  []Change
	// hook, if set, serves the new version's requests instead.
	hook func(n int)
	// newSeen counts the requests and errors the new version answered.
	newSeen, newErrs uint64
}

func newSim(t *testing.T, cfg Config, old, newer *version) *sim {
	return &sim{t: t, cfg: cfg, st: Begin("v1", "v2", cfg, t0), now: t0, old: old, new: newer}
}

// run goes on for d, one tick a second; it stops early at a final
// verdict or a hold.
func (s *sim) run(d time.Duration, rps int) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(time.Second)
		n := rps * s.st.Share() / 100
		before := s.new.total()
		if s.hook != nil {
			s.hook(n)
		} else {
			s.new.serve(n)
		}
		s.old.serve(rps - n)
		after := s.new.total()
		s.newSeen += after.Requests - before.Requests
		s.newErrs += after.Errors - before.Errors
		var ch Change
		s.st, ch = Advance(s.st, &s.w, s.cfg, s.now, 1, 1, s.new.total(), s.old.total())
		if ch != Nothing {
			s.changes = append(s.changes, ch)
		}
		if s.st.Final() || s.st.Verdict == Held {
			return
		}
	}
}

func quick() Config {
	c := Default()
	c.Every, c.Settle, c.Min, c.Wait = 20*time.Second, 5*time.Second, 100, 30*time.Second
	return c
}

func TestRollout_R4f_errors_roll_back_at_the_first_step(t *testing.T) {
	cfg := quick()
	s := newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &version{errRate: 0.2, latency: 10 * time.Millisecond})
	s.run(5*time.Minute, 1000)
	if s.st.Verdict != RolledBack || s.st.Step != 0 || s.st.Share() != 0 {
		t.Fatalf("verdict %s at step %d, share %d; want rolled back at step 0, share 0 (%s)", s.st.Verdict, s.st.Step, s.st.Share(), s.st.Why)
	}
	if !strings.Contains(s.st.Why, "error rate") || !strings.Contains(s.st.Why, LabelMaxErrors) {
		t.Errorf("why = %q; want the error rate and the label named", s.st.Why)
	}
	// The bound: the first step's share of the new version's requests
	// over one settle window plus what the window needs to reach min
	// (rounded up to a tick's requests).
	perTick := uint64(1000 * cfg.Steps[0] / 100)
	bound := uint64(cfg.Settle/time.Second)*perTick + uint64(cfg.Min) + 2*perTick
	if s.newSeen > bound {
		t.Errorf("the new version served %d requests before its rollback, over the bound %d", s.newSeen, bound)
	}
	t.Logf("rolled back after %s: the new version served %d requests, %d errors (bound %d requests); %s",
		s.now.Sub(t0), s.newSeen, s.newErrs, bound, s.st.Why)
	// It stays there.
	st := s.st
	for range 10 {
		s.now = s.now.Add(time.Minute)
		var ch Change
		if st, ch = Advance(st, &s.w, cfg, s.now, 1, 1, s.new.total(), s.old.total()); ch != Nothing || st.Share() != 0 {
			t.Fatalf("a rolled back rollout changed: %v, share %d", ch, st.Share())
		}
	}
}

func TestRollout_R4f_healthy_goes_to_100_and_drains_the_old(t *testing.T) {
	cfg := quick()
	s := newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &version{latency: 10 * time.Millisecond})
	s.run(10*time.Minute, 1000)
	if s.st.Verdict != Done || s.st.Share() != 100 {
		t.Fatalf("verdict %s, share %d (%s); want done at 100%%", s.st.Verdict, s.st.Share(), s.st.Why)
	}
	if want := []Change{Passed, Passed, Passed, Finished}; !equalChanges(s.changes, want) {
		t.Errorf("changes %v, want %v", s.changes, want)
	}
	if nw, ow := Weights(s.st.Share(), 2, 3); nw == 0 || ow != 0 {
		t.Errorf("weights at done: new %d, old %d; want the old drained (0)", nw, ow)
	}
	if took := s.now.Sub(t0); took > time.Duration(len(cfg.Steps))*cfg.Every+4*time.Second {
		t.Errorf("took %s for %d steps of %s", took, len(cfg.Steps), cfg.Every)
	}
	if !strings.Contains(s.st.Why, "drained") {
		t.Errorf("why = %q", s.st.Why)
	}
}

func TestRollout_R4f_slower_p99_rolls_back_on_latency(t *testing.T) {
	cfg := quick()
	s := newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &version{latency: 30 * time.Millisecond})
	s.run(5*time.Minute, 1000)
	if s.st.Verdict != RolledBack || !strings.Contains(s.st.Why, "p99") || !strings.Contains(s.st.Why, LabelMaxLatency) {
		t.Fatalf("verdict %s (%s); want rolled back on latency", s.st.Verdict, s.st.Why)
	}
	// A few slow answers (a GC pause, a loaded host: 2% at 200 ms) in a
	// version as fast as the old one do not fail it.
	jittery := &jitter{every: 50, slow: 200 * time.Millisecond, version: version{latency: 10 * time.Millisecond}}
	s = newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &jittery.version)
	s.hook = jittery.serve
	s.run(10*time.Minute, 1000)
	if s.st.Verdict != Done {
		t.Fatalf("2%% slow answers: verdict %s (%s); want done", s.st.Verdict, s.st.Why)
	}
	// Slower but within the factor passes.
	s = newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &version{latency: 13 * time.Millisecond})
	s.run(10*time.Minute, 1000)
	if s.st.Verdict != Done {
		t.Fatalf("1.3x slower: verdict %s (%s); want done under 1.5x", s.st.Verdict, s.st.Why)
	}
}

func TestRollout_R4f_a_500_during_the_switch_decides_nothing(t *testing.T) {
	cfg := quick()
	cfg.Min = 10
	old, nw := &version{latency: 10 * time.Millisecond}, &version{latency: 10 * time.Millisecond}
	s := newSim(t, cfg, old, nw)
	// A probe of the new instance during the switch answers 500: the
	// only request the new version has served yet.
	s.now = s.now.Add(time.Second)
	nw.c.Record(500, time.Millisecond)
	var ch Change
	s.st, ch = Advance(s.st, &s.w, cfg, s.now, 1, 1, nw.total(), old.total())
	if ch != Nothing || s.st.Verdict != Rolling {
		t.Fatalf("a probe during the settle time decided: %v %s", ch, s.st.Verdict)
	}
	s.run(10*time.Minute, 1000)
	if s.st.Verdict != Done {
		t.Fatalf("verdict %s (%s); want done", s.st.Verdict, s.st.Why)
	}
	// One 500 among the window's requests once it has its min is under
	// the default threshold too.
	s = newSim(t, cfg, old, &version{latency: 10 * time.Millisecond})
	cfg.Min = 100
	s.cfg = cfg
	s.run(cfg.Settle+3*time.Second, 1000) // the window began
	s.new.c.Record(500, time.Millisecond)
	s.run(10*time.Minute, 1000)
	if s.st.Verdict != Done {
		t.Fatalf("one 500 in the window: verdict %s (%s); want done", s.st.Verdict, s.st.Why)
	}
}

func TestRollout_R4f_too_few_requests_wait_then_setting(t *testing.T) {
	for _, proceed := range []bool{false, true} {
		cfg := quick()
		cfg.Proceed = proceed
		s := newSim(t, cfg, &version{latency: 10 * time.Millisecond}, &version{latency: 10 * time.Millisecond})
		// 20 requests a second: 1 a second for the new version at 5%,
		// fewer than min 100 within a step and its wait.
		s.run(cfg.Every+cfg.Wait-time.Second, 20)
		if len(s.changes) != 0 || s.st.Step != 0 {
			t.Fatalf("then proceed=%v: changed before the wait ended: %v, step %d", proceed, s.changes, s.st.Step)
		}
		s.run(2*time.Second, 20)
		switch {
		case proceed && (s.st.Step != 1 || s.st.Verdict != Rolling || !strings.Contains(s.st.Why, "unjudged")):
			t.Errorf("then proceed: step %d %s (%s); want the next step, unjudged", s.st.Step, s.st.Verdict, s.st.Why)
		case !proceed && (s.st.Verdict != Held || s.st.Share() != 5 || !strings.Contains(s.st.Why, "min 100")):
			t.Errorf("then stop: %s at %d%% (%s); want held at 5%%", s.st.Verdict, s.st.Share(), s.st.Why)
		}
	}
}

func TestRollout_R4f_rollback_stays_until_a_newer_version(t *testing.T) {
	cfg := quick()
	st := Abort(Begin("v1", "v2", cfg, t0), t0.Add(time.Second), "test")
	if st.Share() != 0 || st.Stable() != "v1" {
		t.Fatalf("aborted: share %d, stable %s", st.Share(), st.Stable())
	}
	if _, _, ok := Next(&st, []string{"v1", "v2"}); ok {
		t.Error("the rolled back version started again")
	}
	if old, nw, ok := Next(&st, []string{"v1", "v2", "v3"}); !ok || old != "v1" || nw != "v3" {
		t.Errorf("a newer version: %q -> %q %v; want v1 -> v3", old, nw, ok)
	}
	done := Promote(Begin("v1", "v2", cfg, t0), t0, "test")
	if done.Share() != 100 {
		t.Errorf("promoted: share %d", done.Share())
	}
	if old, nw, ok := Next(&done, []string{"v1", "v2", "v3"}); !ok || old != "v2" || nw != "v3" {
		t.Errorf("after done, a newer version: %q -> %q %v; want v2 -> v3", old, nw, ok)
	}
	if old, nw, ok := Next(nil, []string{"v1", "v2"}); !ok || old != "v1" || nw != "v2" {
		t.Errorf("first rollout: %q -> %q %v", old, nw, ok)
	}
	// The new version leaves: abandoned; the old one leaves: done.
	var w Window
	if st, ch := Advance(Begin("v1", "v2", cfg, t0), &w, cfg, t0.Add(time.Second), 0, 1, Sample{}, Sample{}); ch != Left || st.Verdict != Abandoned || st.Share() != 0 {
		t.Errorf("new version gone: %v %s", ch, st.Verdict)
	}
	if st, ch := Advance(Begin("v1", "v2", cfg, t0), &w, cfg, t0.Add(time.Second), 1, 0, Sample{}, Sample{}); ch != Left || st.Verdict != Done {
		t.Errorf("old version gone: %v %s", ch, st.Verdict)
	}
}

func TestRollout_R4f_label_syntax(t *testing.T) {
	cfg, ok, warn := Parse(map[string]string{LabelRollout: "true"})
	if !ok || len(warn) != 0 || cfg.String() != Default().String() {
		t.Fatalf("true: %v %v %s", ok, warn, cfg)
	}
	cfg, ok, warn = Parse(map[string]string{LabelRollout: "10%,50%,100% every 2s settle 500ms min 5 wait 1s then proceed",
		LabelMaxErrors: "0.5%", LabelMaxLatency: "2x"})
	if !ok || len(warn) != 0 {
		t.Fatalf("%v %v", ok, warn)
	}
	if got := cfg.String(); got != "10%,50%,100% every 2s settle 500ms min 5 wait 1s then proceed" || cfg.MaxErrors != 0.5 || cfg.MaxLatency != 2 {
		t.Errorf("got %s, %g, %g", got, cfg.MaxErrors, cfg.MaxLatency)
	}
	if cfg, _, _ := Parse(map[string]string{LabelRollout: "50%,100% every 3s"}); cfg.Settle != 500*time.Millisecond {
		t.Errorf("a short step's default settle: %s", cfg.Settle)
	}
	if _, ok, _ := Parse(map[string]string{LabelRollout: "false"}); ok {
		t.Error("false turned a rollout on")
	}
	for _, bad := range []string{"", "5%,25%", "50%,25%,100%", "0%,100%", "5,100%", "100% every 0s", "100% every",
		"100% settle 2m", "100% min 0", "100% then maybe", "100% soon 1", strings.Repeat("1", 300),
		"1%,2%,3%,4%,5%,6%,7%,8%,9%,10%,100%"} {
		_, ok, warn := Parse(map[string]string{LabelRollout: bad})
		var se *setting.Error
		if ok || len(warn) != 1 || !errors.As(warn[0], &se) || se.Setting != LabelRollout {
			t.Errorf("%q: ok %v, warnings %v; want one naming %s", bad, ok, warn, LabelRollout)
		}
	}
	_, ok, warn = Parse(map[string]string{LabelRollout: "true", LabelMaxErrors: "lots", LabelMaxLatency: "0.5x"})
	if !ok || len(warn) != 2 {
		t.Errorf("bad thresholds: ok %v, %v; want the rollout with two warnings", ok, warn)
	}
}

func TestRollout_R4f_shares_become_weights(t *testing.T) {
	for _, c := range []struct{ share, n, m, nw, ow int }{
		{5, 1, 1, 500, 9500}, {25, 2, 1, 1250, 7500}, {100, 3, 2, 3333, 0}, {0, 2, 2, 0, 5000},
		{1, 200, 1, 1, 9900}, {50, 1, 0, 5000, 0},
	} {
		if nw, ow := Weights(c.share, c.n, c.m); nw != c.nw || ow != c.ow {
			t.Errorf("Weights(%d, %d, %d) = %d, %d; want %d, %d", c.share, c.n, c.m, nw, ow, c.nw, c.ow)
		}
	}
	// The split follows the share whatever the instance counts.
	nw, ow := Weights(25, 3, 2)
	if got := float64(3*nw) / float64(3*nw+2*ow); got < 0.249 || got > 0.251 {
		t.Errorf("25%% over 3 new and 2 old instances: %.3f", got)
	}
}

func TestRollout_R4f_state_refuses_bad_entries(t *testing.T) {
	now := t0.Add(time.Hour)
	good := Begin("v1", "v2", Default(), now)
	good.Owner, good.Claimed = "a", now
	future, stale, corrupt, huge := good, good, good, good
	future.Claimed = now.Add(2 * Ahead)
	stale.Claimed = now.Add(-StaleAfter - time.Second)
	corrupt.Step = 7
	huge.New = strings.Repeat("v", MaxName+1)
	rec := Record{Rollouts: map[string]State{"good": good, "future": future, "stale": stale, "corrupt": corrupt, "huge": huge}}
	b, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, refused, err := Decode(b, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rollouts) != 1 || got.Rollouts["good"].New != "v2" {
		t.Errorf("kept %v", got.Rollouts)
	}
	want := map[string]string{"future": "future", "stale": "stale", "corrupt": "corrupt", "huge": "huge"}
	for _, r := range refused {
		if want[r.Route] != r.Why {
			t.Errorf("refused %s as %s", r.Route, r.Why)
		}
		delete(want, r.Route)
	}
	if len(want) != 0 {
		t.Errorf("not refused: %v", want)
	}
	if _, _, err := Decode([]byte("{not json"), now); err == nil {
		t.Error("a corrupt record decoded")
	}
	if _, _, err := Decode(make([]byte, MaxRecordBytes+1), now); err == nil {
		t.Error("a huge record decoded")
	}
	// Full: the entry ended longest ago makes room, else refused.
	var full Record
	for i := range MaxRoutes {
		st := good
		st.Verdict, st.Ended = Done, now.Add(time.Duration(i)*time.Second)
		if i == 0 {
			st.Verdict = Rolling
		}
		if err := full.Put(string(rune('a'+i%26))+strings.Repeat("x", i/26)+string(rune(i)), st); err != nil {
			t.Fatal(err)
		}
	}
	if err := full.Put("one more", good); err != nil || len(full.Rollouts) != MaxRoutes {
		t.Errorf("full record: %v, %d entries", err, len(full.Rollouts))
	}
	// Ownership lapses after ClaimTTL.
	if Owns(good, "b", now.Add(ClaimTTL/2)) || !Owns(good, "b", now.Add(2*ClaimTTL)) || !Owns(good, "a", now) {
		t.Error("ownership")
	}
}

func equalChanges(a, b []Change) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// jitter is a version whose every Nth answer takes slow.
type jitter struct {
	version
	every int
	slow  time.Duration
	n     int
}

func (j *jitter) serve(n int) {
	for range n {
		if j.n++; j.n%j.every == 0 {
			j.c.Record(200, j.slow)
		} else {
			j.c.Record(200, j.latency)
		}
	}
}
