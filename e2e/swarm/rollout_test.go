//go:build e2e && linux

package swarm

import (
	"context"
	"encoding/json"
	"fmt"
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

// Progressive rollouts (R4f) on Swarm: a service updated with `docker
// service update --update-order start-first --image <v2>`, the version
// being the tasks' image spec, judged by a Caddy (the static one built
// with xcaddy, in a container on the overlay network) whose route is a
// selector: a rollout needs one, and the suite's Caddy routes by
// caddy.host.

// swarmRolloutLabel: short steps; the whole rollout takes about 12 s.
const swarmRolloutLabel = "20%,50%,100% every 4s settle 1s min 30 wait 20s then stop"

// swarmRolloutDelay is the service's --update-delay: Swarm replaces the
// second task that long after the first, so the old version's last task
// runs beside the new one's first for the rollout's time.
const swarmRolloutDelay = 25 * time.Second

// rolloutCaddy starts a Caddy container on the overlay network routing
// :80 to the tasks of the services labelled app=<app>, port 8080, with
// lb_policy dicer_weighted and the retries of the suite's Caddy; it is
// removed when the test ends. It returns its container's name and the
// 127.0.0.1:port of its :80.
func rolloutCaddy(t *testing.T, app string) (string, string) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{
	auto_https off
}

:80 {
	reverse_proxy {
		dynamic swarm app=%s 8080
		lb_policy dicer_weighted
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}
`, app)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := caddyBinary()
	if err != nil {
		t.Fatal(err)
	}
	image, err := buildImage("caddy-rollout", caddyDockerfile, map[string]string{"caddy": bin, "Caddyfile": conf})
	if err != nil {
		t.Fatal(err)
	}
	name := dockertest.Name("caddy-rollout")
	if out, err := docker(time.Minute, "run", "--detach", "--name", name, "--network", network,
		"--label", "caddy-dicer.test.run="+dockertest.RunID(), "--publish", "127.0.0.1::80",
		"--volume", "/var/run/docker.sock:/var/run/docker.sock", image); err != nil {
		t.Fatalf("starting the rollout's Caddy: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker(30*time.Second, "logs", "--tail", "60", name)
			t.Logf("the rollout's Caddy's log (tail):\n%s", logs)
		}
		_, _ = docker(time.Minute, "rm", "--force", name)
	})
	addr, err := published(name, "80/tcp")
	if err != nil {
		t.Fatal(err)
	}
	return name, addr
}

// swarmRollouts is `caddy dicer rollouts --json` in the Caddy container.
func swarmRollouts(caddy string) ([]rollout.Status, error) {
	out, err := docker(30*time.Second, "exec", caddy, "/usr/bin/caddy", "dicer", "rollouts", "--json")
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var list []rollout.Status
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	return list, nil
}

// versionAnswer is what a client saw of one request: the version in the
// body (the service's NAME), or a failure.
type versionAnswer struct {
	at      time.Time
	version string
	failed  string // "" when 200
}

// versionLoad sends requests to addr from workers goroutines until
// stopped.
type versionLoad struct {
	mu      sync.Mutex
	answers []versionAnswer
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startVersionLoad(addr string, workers int) *versionLoad {
	l := &versionLoad{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				r := testkit.Caddy{Addr: addr, Client: httpClient}.Get(context.Background(), "rollout.swarm.test", "/")
				a := versionAnswer{at: time.Now()}
				if r.Err != nil || r.Status != 200 {
					a.failed = fmt.Sprintf("%d %q %v", r.Status, strings.TrimSpace(r.Body), r.Err)
				} else {
					a.version = strings.TrimPrefix(strings.TrimSpace(r.Body), "hello from ")
				}
				l.mu.Lock()
				l.answers = append(l.answers, a)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *versionLoad) end() []versionAnswer {
	close(l.stop)
	l.wg.Wait()
	return l.answers
}

// R4f on Swarm: a two-replica service of v1 labelled caddy.rollout,
// updated with `docker service update --update-order start-first
// --update-parallelism 1 --update-delay 25s --image <v2>`: the first v2
// task starts beside the last v1 one, the rollout takes v2 to 100% and
// drains v1 before Swarm replaces that task, and the clients saw not one
// failed request from before the update to its end, v1's tasks stopped
// included.
func TestSwarm_R4f_a_start_first_update_rolls_out_to_100(t *testing.T) {
	app := dockertest.Name("ro-swarm")
	s := createServiceFor(t, "ro", "", helloV1, 2,
		"--label", "app="+app, "--label", "caddy.rollout="+swarmRolloutLabel, "--env", "NAME=v1",
		"--update-order", "start-first", "--update-parallelism", "1", "--update-delay", swarmRolloutDelay.String())
	waitRunning(t, s, 2)
	caddy, addr := rolloutCaddy(t, app)
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		r := testkit.Caddy{Addr: addr, Client: httpClient}.Get(context.Background(), "rollout.swarm.test", "/")
		return r.Err == nil && r.Status == 200 && strings.TrimSpace(r.Body) == "hello from v1"
	}) {
		t.Fatalf("the rollout's Caddy does not route to v1 within 30 s")
	}
	l := startVersionLoad(addr, 4)
	time.Sleep(time.Second) // v1's traffic before v2
	updated := time.Now()
	if out, err := docker(time.Minute, "service", "update", "--detach", "--quiet", "--no-resolve-image",
		"--image", helloV2, "--env-add", "NAME=v2", s.name); err != nil {
		l.end()
		t.Fatalf("docker service update: %v\n%s", err, out)
	}
	var st rollout.Status
	var lastErr error
	var seen []string
	if !testkit.UntilEvery(60*time.Second, 200*time.Millisecond, func() bool {
		list, err := swarmRollouts(caddy)
		if lastErr = err; err != nil || len(list) == 0 {
			return false
		}
		st = list[0]
		if step := fmt.Sprintf("%s %d%%", st.Verdict, st.Share); len(seen) == 0 || seen[len(seen)-1] != step {
			seen = append(seen, step)
		}
		return st.Verdict != rollout.Rolling
	}) {
		l.end()
		t.Fatalf("the rollout did not end within 60 s of the update: last %s at %d%% (%s), %v; seen %v", st.Verdict, st.Share, st.Why, lastErr, seen)
	}
	t.Logf("%s %s after the update (%s -> %s): %v; %s", st.Verdict, time.Since(updated).Round(100*time.Millisecond),
		st.Old, st.New, seen, st.Why)
	if st.Verdict != rollout.Done || st.Share != 100 || !st.Drained || st.New != helloV2 || st.Old != helloV1 {
		t.Errorf("rollout %s -> %s: %s, share %d, drained %v; want %s -> %s done, 100%%, v1 drained", st.Old, st.New, st.Verdict, st.Share, st.Drained, helloV1, helloV2)
	}
	// Swarm then replaces v1's last task, after the update delay: the
	// update ends with v2 alone.
	if !testkit.UntilEvery(swarmRolloutDelay+time.Minute, 250*time.Millisecond, func() bool {
		ts := tasks(t, s)
		if len(ts) != 2 {
			return false
		}
		for _, tk := range ts {
			if tk.Spec.ContainerSpec == nil || tk.Spec.ContainerSpec.Image != helloV2 {
				return false
			}
		}
		return true
	}) {
		l.end()
		t.Fatalf("Swarm's update did not end with two v2 tasks")
	}
	waitRunning(t, s, 2)
	time.Sleep(time.Second) // the last v1 task's leaving, under load
	answers := l.end()
	var failed []string
	byVersion := map[string]int{}
	v1After := 0
	for _, a := range answers {
		if a.failed != "" {
			failed = append(failed, a.failed)
			continue
		}
		byVersion[a.version]++
		if st.Verdict == rollout.Done && a.version == "v1" && a.at.After(st.Ended.Add(1500*time.Millisecond)) {
			v1After++
		}
	}
	t.Logf("%d requests from before the update to its end %s later: %v, %d failed", len(answers),
		time.Since(updated).Round(100*time.Millisecond), byVersion, len(failed))
	if len(failed) != 0 {
		t.Errorf("%d failed requests, want 0: %v", len(failed), failed[:min(len(failed), 5)])
	}
	if v1After != 0 {
		t.Errorf("%d requests reached v1 more than 1.5 s after it was drained", v1After)
	}
	if byVersion["v2"] == 0 || byVersion["v1"] == 0 || len(answers) < 200 {
		t.Errorf("answers by version %v of %d requests: the rollout was not exercised", byVersion, len(answers))
	}
}
