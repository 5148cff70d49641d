//go:build e2e && linux

package fleet

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// More of R4f's "done when" through Caddys built with xcaddy: a probe of
// the new version answered 500 during the switch, and a Caddy restarted
// in the middle of a rollout.

// probeLabel settles for 2 s, so that a probe sent the moment the
// rollout begins lands well inside the settle time on a loaded machine.
const (
	probeSettle = 2 * time.Second
	probeLabel  = "20%,50%,100% every 4s settle 2s min 30 wait 20s then stop"
)

// healthFlip sets the test server's /healthz of the container at ip to
// answer 503 (bad) or 200 (good), directly, not through Caddy.
func healthFlip(t *testing.T, ip, to string) {
	t.Helper()
	res, err := http.Post("http://"+ip+":8080/health/"+to, "text/plain", nil)
	if err != nil {
		t.Fatalf("POST /health/%s to %s: %v", to, ip, err)
	}
	res.Body.Close()
}

// awaitRolling waits, polling every 20 ms, until the Caddy shows the
// route's rollout under way, and returns it.
func awaitRolling(t *testing.T, p *caddyProc, within time.Duration) rollout.Status {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, st := range p.rollouts() {
			if st.Verdict == rollout.Rolling {
				return st
			}
		}
	}
	t.Fatalf("Caddy %s: no rollout under way within %s", p.name, within)
	return rollout.Status{}
}

// R4f: v2 healthy, but the first request to it that a client sends
// through Caddy as the rollout begins (a deploy script's probe through
// the proxy, during the switch) answers 5xx: no rollback, v2 goes to
// 100% and v1 drains; the clients saw that one error and no other. The
// probe is /healthz of v2 turned bad for the moment of the probe (503);
// with min 30 one error in a window would be a rate of 3.3%, over the 1
// point allowed, so only the settle time keeps it from deciding.
func TestFleet_R4f_a_500_from_the_new_version_during_the_switch_is_no_rollback(t *testing.T) {
	app := dockertest.Name("ro-probe")
	versionWith(t, app, "v1", probeLabel)
	p := newRolloutCaddy(t, "a", t.TempDir(), app)
	routes(t, p, "rollout.test")
	l := startLoad(p)
	time.Sleep(time.Second)
	c2 := versionWith(t, app, "v2", probeLabel)
	ip2 := testkit.ContainerIP(t, cli, c2.ID, "")
	st := awaitRolling(t, p, 20*time.Second)
	healthFlip(t, ip2, "bad")
	var probed time.Time
	tries := 0
	for ; tries < 200 && probed.IsZero(); tries++ {
		status, body, _, err := p.get("rollout.test", "/healthz", 5*time.Second)
		if err != nil {
			continue
		}
		if status >= 500 {
			probed = time.Now()
			t.Logf("the probe got %d %q from v2 (try %d)", status, strings.TrimSpace(body), tries+1)
		}
	}
	healthFlip(t, ip2, "good")
	if probed.IsZero() {
		t.Fatalf("no probe reached v2 in %d tries", tries)
	}
	into := probed.Sub(st.StepStart)
	t.Logf("the 5xx came %s after the rollout began (step %d, share %d%%), settle %s", into.Round(time.Millisecond), st.Step, st.Share, probeSettle)
	if into >= probeSettle {
		t.Fatalf("the probe came %s after the step began, past its settle time %s: the machine was too slow for this test", into, probeSettle)
	}
	done := awaitVerdict(t, p, rollout.Done, 40*time.Second)
	answers := l.end()
	failed, v2 := 0, 0
	for _, a := range answers {
		if a.err || a.status != 200 {
			failed++
		}
		if a.version == "v2" {
			v2++
		}
	}
	t.Logf("%d requests of the load, %d to v2, %d failed; %s in %s; %s", len(answers), v2, failed, done.Verdict,
		done.Ended.Sub(done.Started).Round(100*time.Millisecond), done.Why)
	if done.Share != 100 || !done.Drained {
		t.Errorf("share %d, drained %v: want 100, drained", done.Share, done.Drained)
	}
	if failed != 0 {
		t.Errorf("%d failed requests of the load, want 0", failed)
	}
}

// restartLabel's steps are long enough (8 s) for a Caddy to stop and
// start again within one.
const restartLabel = "20%,50%,100% every 8s settle 1s min 30 wait 20s then stop"

// R4f: two Caddys sharing storage; the deciding one is stopped in its
// rollout's second step (50%) and started again: it shows that step, of
// the same rollout (same start), decides again (its instance ID is its
// own across a restart), and the rollout goes to 100% with not one failed
// request through the other Caddy.
func TestFleet_R4f_a_Caddy_restarted_mid_rollout_resumes_at_its_step(t *testing.T) {
	app := dockertest.Name("ro-restart")
	versionWith(t, app, "v1", restartLabel)
	storage := t.TempDir()
	a, b := newRolloutCaddy(t, "a", storage, app), newRolloutCaddy(t, "b", storage, app)
	routes(t, a, "rollout.test")
	routes(t, b, "rollout.test")
	la, lb := startLoad(a), startLoad(b)
	time.Sleep(time.Second)
	versionWith(t, app, "v2", restartLabel)
	awaitRolling(t, a, 20*time.Second)
	var before rollout.Status
	var decider, other *caddyProc
	if !testkit.UntilEvery(30*time.Second, 20*time.Millisecond, func() bool {
		for _, p := range []*caddyProc{a, b} {
			for _, st := range p.rollouts() {
				if st.Decider && st.Verdict == rollout.Rolling && st.Step == 1 {
					before, decider = st, p
					return true
				}
			}
		}
		return false
	}) {
		t.Fatalf("no Caddy decides the rollout at its second step within 30 s: a %+v, b %+v", a.rollouts(), b.rollouts())
	}
	other = a
	if decider == a {
		other = b
	}
	decider.Stop()
	stopped := time.Now()
	decider.start()
	var after rollout.Status
	if !testkit.UntilEvery(10*time.Second, 20*time.Millisecond, func() bool {
		for _, st := range decider.rollouts() {
			after = st
			return true
		}
		return false
	}) {
		t.Fatalf("the restarted Caddy %s shows no rollout within 10 s", decider.name)
	}
	back := time.Now()
	cmdOut, _ := exec.Command(caddyBin, "dicer", "rollouts", "--address", fmt.Sprintf("127.0.0.1:%d", decider.admin)).CombinedOutput()
	t.Logf("Caddy %s (the decider) stopped %s into step 2 and back after %s, showing step %d (%d%%), %s, decider %v; caddy dicer rollouts:\n%s",
		decider.name, stopped.Sub(before.StepStart).Round(100*time.Millisecond), back.Sub(stopped).Round(100*time.Millisecond),
		after.Step+1, after.Share, after.Verdict, after.Decider, cmdOut)
	if after.Step != 1 || after.Verdict != rollout.Rolling || !after.Started.Equal(before.Started) || !after.StepStart.Equal(before.StepStart) {
		t.Errorf("after the restart: step %d, %s, started %s, step started %s; want step 1 (50%%) still under way, of the rollout started %s, its step started %s",
			after.Step, after.Verdict, after.Started, after.StepStart, before.Started, before.StepStart)
	}
	if !strings.Contains(string(cmdOut), "2/3 (20%,50%,100%)") {
		t.Errorf("caddy dicer rollouts does not show step 2/3:\n%s", cmdOut)
	}
	done := awaitVerdict(t, decider, rollout.Done, 40*time.Second)
	awaitVerdict(t, other, rollout.Done, 5*time.Second)
	if !done.Decider {
		t.Errorf("the restarted Caddy %s does not decide the rollout it decided", decider.name)
	}
	answersOther := map[*caddyProc][]answer{a: la.end(), b: lb.end()}
	count := func(as []answer) (failed int) {
		for _, x := range as {
			if x.err || x.status != 200 {
				failed++
			}
		}
		return failed
	}
	fo, fd := count(answersOther[other]), count(answersOther[decider])
	t.Logf("done in %s: %d requests through %s, %d failed; %d through the restarted %s, %d failed (while it was down); %s",
		done.Ended.Sub(done.Started).Round(100*time.Millisecond), len(answersOther[other]), other.name, fo,
		len(answersOther[decider]), decider.name, fd, done.Why)
	if fo != 0 {
		t.Errorf("%d failed requests through the Caddy that was not restarted, want 0", fo)
	}
}
