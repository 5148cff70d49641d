//go:build e2e && linux

package fleet

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// Progressive rollouts (R4f) through Caddys built with xcaddy, containers
// of the test image as v1 and v2 of one route (caddy.version), clients
// counting what they saw.

// rolloutLabel is the rollout of these tests: short steps, a settle time
// of a second.
const (
	rolloutEvery  = 4 * time.Second
	rolloutSettle = time.Second
	rolloutLabel  = "20%,50%,100% every 4s settle 1s min 30 wait 20s then stop"
)

// rolloutSite is a Caddy's Caddyfile: a route by the selector app=<app>.
func rolloutSite(admin, httpPort int, storage, app string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	storage file_system %s
	http_port %d
	auto_https off
}

:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy dicer_weighted
	}
}
`, admin, storage, httpPort, httpPort, app)
}

// newRolloutCaddy is newCaddy with rolloutSite.
func newRolloutCaddy(t *testing.T, name, storage, app string) *caddyProc {
	t.Helper()
	p := &caddyProc{name: name, admin: testkit.FreePort(t, "127.0.0.1"), http: testkit.FreePort(t, "127.0.0.1"), t: t}
	p.CaddyProcess = testkit.CaddyProcess{Name: name, Bin: caddyBin, Home: t.TempDir(), Admin: p.admin}
	p.Config = filepath.Join(p.Home, "Caddyfile")
	if err := os.WriteFile(p.Config, []byte(rolloutSite(p.admin, p.http, storage, app)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	return p
}

// version starts a container of app as version v, with env.
func version(t *testing.T, app, v string, env ...string) dockertest.Container {
	t.Helper()
	return versionWith(t, app, v, rolloutLabel, env...)
}

// versionWith is version with the caddy.rollout label given.
func versionWith(t *testing.T, app, v, label string, env ...string) dockertest.Container {
	t.Helper()
	return dockertest.Start(t, cli, dockertest.Options{Name: app + "-" + v,
		Env:    append([]string{"NAME=" + v}, env...),
		Labels: map[string]string{"app": app, "caddy.version": v, "caddy.rollout": label}})
}

// answer is what a client saw of one request.
type answer struct {
	at      time.Time
	status  int
	version string // v1, v2, "" when no body said
	err     bool
}

// load sends requests through the Caddys, round robin, from four
// clients, each pausing 20 ms between requests, until stop.
type load struct {
	mu      sync.Mutex
	answers []answer
	stop    chan struct{}
	done    sync.WaitGroup
}

func startLoad(caddys ...*caddyProc) *load {
	l := &load{stop: make(chan struct{})}
	for i := range 4 {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for n := i; ; n++ {
				select {
				case <-l.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				status, body, _, err := caddys[n%len(caddys)].get("rollout.test", "/", 5*time.Second)
				a := answer{at: time.Now(), status: status, err: err != nil}
				if v, ok := strings.CutPrefix(strings.TrimSpace(body), "hello from "); ok {
					a.version = v
				}
				l.mu.Lock()
				l.answers = append(l.answers, a)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) end() []answer {
	close(l.stop)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answers
}

// snapshot is what the clients saw so far.
func (l *load) snapshot() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]answer(nil), l.answers...)
}

// rollouts is the Caddy's GET /dicer/rollouts.
func (p *caddyProc) rollouts() []rollout.Status {
	var out []rollout.Status
	_ = json.Unmarshal([]byte(p.adminGet("/dicer/rollouts")), &out)
	return out
}

// awaitVerdict waits until the Caddy's rollout of the route has verdict.
func awaitVerdict(t *testing.T, p *caddyProc, verdict rollout.Verdict, within time.Duration) rollout.Status {
	t.Helper()
	var last rollout.Status
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, st := range p.rollouts() {
			last = st
			if st.Verdict == verdict {
				return st
			}
		}
	}
	t.Fatalf("Caddy %s: not %s within %s; last: %s at step %d, share %d: %s", p.name, verdict, within, last.Verdict, last.Step, last.Share, last.Why)
	return last
}

// R4f: v1 healthy, v2 answers 500 to 20% of requests: rolled back at its
// first step (20%), the clients' errors bounded by that step's share of
// v2's error rate over one settle window plus one step of requests, and
// no request reaches v2 once the rollback is written.
func TestFleet_R4f_a_bad_version_is_rolled_back_at_its_first_step(t *testing.T) {
	app := dockertest.Name("ro-bad")
	version(t, app, "v1")
	p := newRolloutCaddy(t, "a", t.TempDir(), app)
	routes(t, p, "rollout.test")
	l := startLoad(p)
	time.Sleep(time.Second) // v1's traffic before v2
	version(t, app, "v2", "ERROR_RATE=0.2")
	st := awaitVerdict(t, p, rollout.RolledBack, 40*time.Second)
	rolledBack := time.Now()
	if st.Step != 0 || st.Share != 0 || !strings.Contains(st.Why, "error rate") || !st.Decider {
		t.Errorf("rolled back at step %d, share %d, decider %v: %s; want step 0 (20%%), share 0, on the error rate", st.Step, st.Share, st.Decider, st.Why)
	}
	time.Sleep(3 * time.Second)
	answers := l.end()

	var first time.Time
	var v2, errs, v2After, total int
	for _, a := range answers {
		total++
		if a.version == "v2" || a.status >= 500 {
			if first.IsZero() {
				first = a.at
			}
		}
		if a.version == "v2" {
			v2++
		}
		if a.err || a.status != 200 {
			errs++
		}
		if a.at.After(st.Ended.Add(500*time.Millisecond)) && (a.version == "v2" || a.status != 200) {
			v2After++
		}
	}
	rate := float64(total) / answers[len(answers)-1].at.Sub(answers[0].at).Seconds()
	// The bound: the errors expected of v2's share over one settle window
	// plus one step, and three standard deviations of that count (v2's
	// 500s are drawn at random, and so is which version a request gets:
	// errors = Binomial(share x requests, 20%) with the share itself a
	// Binomial draw), which a sound rollout exceeds about once in a
	// thousand runs. The stop-49 bound of mean + 5 was about one standard
	// deviation and failed one clean-clone run at 38 errors over 34.
	const share, errRate = 0.20, 0.20
	window := rate * (rolloutSettle + rolloutEvery).Seconds()
	mean := share * errRate * window
	variance := share*window*errRate*(1-errRate) + errRate*errRate*window*share*(1-share)
	bound := int(math.Ceil(mean + 3*math.Sqrt(variance)))
	t.Logf("rolled back %s after v2's first answer (%s): clients saw %d requests to v2, %d errors of %d requests (%.0f/s); bound %d errors; %s",
		st.Ended.Sub(first).Round(100*time.Millisecond), rolledBack.Sub(first).Round(100*time.Millisecond), v2, errs, total, rate, bound, st.Why)
	if errs > bound {
		t.Errorf("clients saw %d errors, over the bound %d (20%% share x 20%% errors x %.0f/s x (settle %s + step %s) = %.1f, + 3 standard deviations)",
			errs, bound, rate, rolloutSettle, rolloutEvery, mean)
	}
	if v2After != 0 {
		t.Errorf("%d answers from v2 (or errors) more than 0.5 s after the rollback", v2After)
	}
	// It stays rolled back.
	if st := awaitVerdict(t, p, rollout.RolledBack, time.Second); st.Share != 0 {
		t.Errorf("share %d after the rollback", st.Share)
	}
}

// R4f: v2 healthy and as fast, two Caddys sharing storage: 100% after the
// steps, not one failed request, v1 drained (nothing reaches it through
// either Caddy), one decider, both Caddys showing the same verdict, and
// the same share within a second of each other at every step (sampled
// from both admin APIs every 50 ms).
func TestFleet_R4f_a_good_version_goes_to_100_and_the_old_drains(t *testing.T) {
	app := dockertest.Name("ro-good")
	version(t, app, "v1")
	storage := t.TempDir()
	a, b := newRolloutCaddy(t, "a", storage, app), newRolloutCaddy(t, "b", storage, app)
	routes(t, a, "rollout.test")
	routes(t, b, "rollout.test")
	l := startLoad(a, b)
	time.Sleep(time.Second)
	sm := sampleShares(a, b)
	version(t, app, "v2")
	sa := awaitVerdict(t, a, rollout.Done, 60*time.Second)
	sb := awaitVerdict(t, b, rollout.Done, 5*time.Second)
	done := time.Now()
	if sa.Decider == sb.Decider {
		t.Errorf("decider: a %v, b %v; want exactly one", sa.Decider, sb.Decider)
	}
	if !sa.Drained || sa.Share != 100 || sa.Started != sb.Started {
		t.Errorf("a: drained %v, share %d; started %s and %s on a and b", sa.Drained, sa.Share, sa.Started, sb.Started)
	}
	time.Sleep(3 * time.Second)
	samples := sm.end()
	lag, verdicts := shareLag(t, samples)
	t.Logf("shares: %d samples of both Caddys; the longest one Caddy showed a share (or verdict) the other did not yet: %s; verdicts seen: %v",
		len(samples), lag.Round(10*time.Millisecond), verdicts)
	if lag > shareLagBound {
		t.Errorf("a Caddy showed another share than the other's for %s, want within %s (a second, and the sampling)", lag, shareLagBound)
	}
	for _, v := range verdicts {
		if v != rollout.Rolling && v != rollout.Done {
			t.Errorf("a Caddy showed the verdict %s: want rolling then done on both (one verdict)", v)
		}
	}
	answers := l.end()
	var failed, v1After, v2 int
	for _, x := range answers {
		if x.err || x.status != 200 {
			failed++
		}
		if x.version == "v2" {
			v2++
		}
		if x.version == "v1" && x.at.After(sa.Ended.Add(1500*time.Millisecond)) {
			v1After++
		}
	}
	t.Logf("done in %s (%s); %d requests, %d to v2, %d failed; %s", sa.Ended.Sub(sa.Started).Round(100*time.Millisecond),
		done.Sub(sa.Started).Round(100*time.Millisecond), len(answers), v2, failed, sa.Why)
	if failed != 0 {
		t.Errorf("%d failed requests during the rollout, want 0", failed)
	}
	if v1After != 0 {
		t.Errorf("%d requests reached v1 more than 1.5 s after it was drained", v1After)
	}
}

// R4f: v2 healthy but 3x slower (60 ms against v1's 20 ms): rolled back
// on its p99 latency, not on errors.
func TestFleet_R4f_a_slower_version_is_rolled_back_on_latency(t *testing.T) {
	app := dockertest.Name("ro-slow")
	version(t, app, "v1", "DELAY=20ms")
	p := newRolloutCaddy(t, "a", t.TempDir(), app)
	routes(t, p, "rollout.test")
	l := startLoad(p)
	time.Sleep(time.Second)
	version(t, app, "v2", "DELAY=60ms")
	st := awaitVerdict(t, p, rollout.RolledBack, 40*time.Second)
	answers := l.end()
	failed := 0
	for _, a := range answers {
		if a.err || a.status != 200 {
			failed++
		}
	}
	t.Logf("%d requests, %d failed; %s", len(answers), failed, st.Why)
	if !strings.Contains(st.Why, "p99") || failed != 0 {
		t.Errorf("rolled back for %q with %d failed requests; want on the p99 latency, none failed", st.Why, failed)
	}
}

// shareSample is both Caddys' rollout of the route at one moment (the
// verdict "" when one showed none).
type shareSample struct {
	at                 time.Time
	shareA, shareB     int
	verdictA, verdictB rollout.Verdict
}

// sharePoll is how often sampleShares asks both Caddys; shareLagBound
// is a second (the fleet's reading of the record) and two polls.
const (
	sharePoll     = 50 * time.Millisecond
	shareLagBound = time.Second + 2*sharePoll
)

// sampler polls two Caddys' GET /dicer/rollouts until end.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []shareSample
}

func sampleShares(a, b *caddyProc) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(sharePoll):
			}
			x := shareSample{at: time.Now()}
			for _, st := range a.rollouts() {
				x.shareA, x.verdictA = st.Share, st.Verdict
			}
			for _, st := range b.rollouts() {
				x.shareB, x.verdictB = st.Share, st.Verdict
			}
			s.samples = append(s.samples, x)
		}
	}()
	return s
}

func (s *sampler) end() []shareSample {
	close(s.stop)
	<-s.done
	return s.samples
}

// shareLag is the longest time the two Caddys showed different shares
// (or verdicts), from the samples once both showed the rollout, and the
// verdicts either showed.
func shareLag(t *testing.T, samples []shareSample) (time.Duration, []rollout.Verdict) {
	t.Helper()
	var longest time.Duration
	var since time.Time
	seen := map[rollout.Verdict]bool{}
	var verdicts []rollout.Verdict
	for _, x := range samples {
		for _, v := range []rollout.Verdict{x.verdictA, x.verdictB} {
			if v != "" && !seen[v] {
				seen[v] = true
				verdicts = append(verdicts, v)
			}
		}
		if x.shareA == x.shareB && x.verdictA == x.verdictB {
			if !since.IsZero() {
				longest = max(longest, x.at.Sub(since))
				since = time.Time{}
			}
			continue
		}
		if since.IsZero() {
			since = x.at
		}
	}
	if !since.IsZero() {
		t.Errorf("the Caddys still showed different shares at the last sample: %+v", samples[len(samples)-1])
	}
	return longest, verdicts
}
