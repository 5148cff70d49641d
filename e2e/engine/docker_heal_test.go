package engine

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// healLoad sends requests for host until stop, counting the answers that are
// not c's 200.
type healLoad struct {
	sent, failed atomic.Int64
	last         atomic.Value // the last failure, a string
	stop         chan struct{}
	once         sync.Once
	done         chan struct{}
}

// startHealLoad starts a healLoad for host, a request every 20 ms. It
// ends when t does, if not before: a load left running after a failed
// check would send a request every 20 ms to Caddy's port for the rest of
// the process, to the sites of every later test (the catch-all sites of a
// repetition's standby, even-share and metrics tests among them).
func startHealLoad(t *testing.T, host string) *healLoad {
	l := &healLoad{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(l.end)
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r, _ := getRetry(host, "/", 5*time.Second)
			l.sent.Add(1)
			if r.err != nil || r.status != http.StatusOK {
				l.failed.Add(1)
				l.last.Store(r.String())
			}
		}
	}()
	return l
}

// end stops the load and waits until its last request is answered; once
// stopped, it returns at once.
func (l *healLoad) end() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// R1e on the real Engine: of two instances of a route, the one labelled
// caddy.heal=2s whose health check starts failing is restarted by Caddy
// about 2 s after the Engine marked it unhealthy, and comes back healthy;
// meanwhile every request goes to the healthy one (0 failed).
func TestDocker_R1e_heal_restarts_unhealthy_instance_and_none_fails(t *testing.T) {
	cli := engine(t)
	host := hostName("r1e-heal")
	check := dockertest.HealthCheck(200*time.Millisecond, 0)
	dockertest.Start(t, cli, dockertest.Options{Name: "r1e-good", Health: check,
		Labels: map[string]string{"caddy.host": host}})
	sick := dockertest.Start(t, cli, dockertest.Options{Name: "r1e-sick", Health: check,
		Labels: map[string]string{"caddy.host": host, "caddy.heal": "2s"}, Ports: []string{"127.0.0.1::8080"}})
	seen := testkit.WatchContainer(t, cli, sick.ID)
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
		}
		%s
	}
}`, httpPort, upstreamHeader))
	answeredBy(t, tester, host, 2)

	l := startHealLoad(t, host)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code, _, err := dockertest.Post(ctx, dockertest.PublishedAddr(t, cli, sick, "8080/tcp"), "/health/bad"); err != nil || code != http.StatusOK {
		t.Fatalf("POST /health/bad: %d %v", code, err)
	}
	testkit.Eventually(t, 20*time.Second, sick.Name+" restarted by Caddy", func() bool { return len(seen.Times("restart")) > 0 })
	waitHealth(t, cli, sick, container.Healthy)
	answeredBy(t, tester, host, 2)
	l.end()

	// The restart starts with its stop signal (the kill event), and its
	// restart event comes once the container runs again.
	unhealthy, kills, restarts := seen.Times("health_status: unhealthy"), seen.Times("kill"), seen.Times("restart")
	if len(unhealthy) == 0 || len(kills) == 0 {
		t.Fatalf("events: %d unhealthy, %d kill", len(unhealthy), len(kills))
	}
	after := kills[0].Sub(unhealthy[0])
	t.Logf("restart began %s after the Engine marked it unhealthy, ran %s; %d requests meanwhile, %d failed",
		after.Round(time.Millisecond), restarts[0].Sub(kills[0]).Round(time.Millisecond), l.sent.Load(), l.failed.Load())
	if after < 2*time.Second || after > 6*time.Second { // no sooner than caddy.heal; the upper bound leaves room for a loaded machine
		t.Errorf("restarted %s after it turned unhealthy, want about caddy.heal=2s", after)
	}
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed while %s was unhealthy and restarted (last: %v), want 0", n, l.sent.Load(), sick.Name, l.last.Load())
	}
	if len(restarts) != 1 {
		t.Errorf("%d restarts, want 1", len(restarts))
	}
	if lines := testkit.LogLines(t, logFile, `"restarting unhealthy container"`, `"instance":"`+sick.Name+`"`, `"attempt":1`); len(lines) != 1 {
		t.Errorf("%d restart log lines for %s, want 1", len(lines), sick.Name)
	}
}

// R1e on the real Engine: a container that stays broken (its check fails
// from the start) is restarted with a growing backoff (caddy.heal=1s:
// gaps of at least 2 s, then 4 s) and no more than heal_max_restarts (3
// here), with one warning when it reaches that.
func TestDocker_R1e_heal_backoff_grows_and_cap_holds(t *testing.T) {
	cli := engine(t)
	host := hostName("r1e-broken")
	broken := dockertest.Start(t, cli, dockertest.Options{Name: "r1e-broken", Env: []string{"HEALTH=bad"},
		Health: dockertest.HealthCheck(200*time.Millisecond, 0), Labels: map[string]string{"caddy.host": host, "caddy.heal": "1s"}})
	seen := testkit.WatchContainer(t, cli, broken.ID)
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
			heal_max_restarts 3
		}
	}
}`, httpPort))
	capped := `"container unhealthy, not restarted: heal_max_restarts reached"`
	// The warning comes after three restarts, their backoffs (2 s, 4 s,
	// 8 s) and each restarted container turning unhealthy again: about
	// 20 s on a quiet machine; the Engine's restarts and health checks
	// slow down on a loaded one (a CI run took over 40 s), which is not
	// what this test is about.
	testkit.Eventually(t, 120*time.Second, "the cap's warning", func() bool {
		return len(testkit.LogLines(t, logFile, capped, `"instance":"`+broken.Name+`"`)) == 1
	})
	time.Sleep(2 * time.Second) // a restart past the cap would show by now (the checks run every 200 ms)
	restarts := seen.Times("restart")
	if len(restarts) != 3 {
		t.Fatalf("%d restarts, want heal_max_restarts=3", len(restarts))
	}
	// The gaps between Caddy's restart calls (its log lines): the restart
	// events come once each container runs again, which takes the
	// Engine a varying time.
	calls := logTimes(t, logFile, "restarting unhealthy container", broken.Name)
	if len(calls) != 3 {
		t.Fatalf("%d restart log lines, want 3", len(calls))
	}
	var gaps []time.Duration
	for i := 1; i < len(calls); i++ {
		gaps = append(gaps, calls[i].Sub(calls[i-1]).Round(time.Millisecond))
	}
	t.Logf("restart calls at gaps %v", gaps)
	// A gap is the backoff or, when longer, the time the restarted
	// container takes to turn unhealthy again: on a loaded Engine that
	// was 4.2 s, so the gaps were 4.4 s then 4.2 s. The backoff's growth
	// shows in the least gaps, not in their order.
	if gaps[0] < 2*time.Second || gaps[1] < 4*time.Second {
		t.Errorf("gaps %v, want at least 2 s then at least 4 s", gaps)
	}
	if n := len(testkit.LogLines(t, logFile, capped)); n != 1 {
		t.Errorf("%d cap warnings, want 1", n)
	}
	for i := 1; i <= 3; i++ {
		if lines := testkit.LogLines(t, logFile, `"restarting unhealthy container"`, fmt.Sprintf(`"attempt":%d`, i)); len(lines) != 1 {
			t.Errorf("%d log lines of attempt %d, want 1", len(lines), i)
		}
	}
}
