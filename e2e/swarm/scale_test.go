//go:build e2e && linux

package swarm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/swarm"

	swarmadapter "github.com/caddy-dicer/caddy-dicer/internal/swarm"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// specReplicas is the replica count of s's spec.
func specReplicas(t *testing.T, s svc) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sv, _, err := cli.ServiceInspectWithRaw(ctx, s.name, swarm.ServiceInspectOptions{})
	if err != nil {
		t.Errorf("ServiceInspect %s: %v", s.name, err)
		return -1
	}
	return int(*sv.Spec.Mode.Replicated.Replicas)
}

// A replicated service at 1 replica, caddy.soft_limit=4 and
// caddy.max_replicas=2, under a step of 16 clients of a 200 ms answer:
// Caddy scales it to 2 replicas, not beyond, both serve, no request
// fails; once the load stops, back to 1 within caddy.standby_after and a
// bound (R5j on Swarm).
func TestSwarmSoftLimitScales(t *testing.T) {
	const after = 3 * time.Second
	s := createService(t, "grow", helloV1, 1,
		"--label", "caddy.soft_limit=4", "--label", "caddy.max_replicas=2", "--label", "caddy.standby_after="+after.String())
	first := waitRunning(t, s, 1)
	waitServedBy(t, s, first, 30*time.Second)
	grewBefore := loadWakes(t)

	caddy := testkit.Caddy{Addr: caddyAddr, Client: httpClient}
	var mu sync.Mutex
	servedBy := map[string]time.Time{} // first answer of each task
	slow := func() testkit.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r := caddy.Get(ctx, s.host, "/slow?d=200ms")
		r.Body = strings.TrimSpace(r.Body)
		if r.Is(http.StatusOK, "") {
			mu.Lock()
			if _, ok := servedBy[r.Body]; !ok {
				servedBy[r.Body] = time.Now()
			}
			mu.Unlock()
		}
		return r
	}
	step := time.Now()
	l := testkit.StartLoad(16, slow, func(r testkit.Result) bool { return r.Is(http.StatusOK, "") })
	defer l.Stop() // also when the test fails
	if !testkit.UntilEvery(time.Minute, 50*time.Millisecond, func() bool { return specReplicas(t, s) == 2 }) {
		l.Stop()
		t.Fatalf("%s not scaled to 2 replicas within a minute of 16 clients; Caddy's log:\n%s", s.name, caddyLog(s.name))
	}
	scaled := time.Since(step)
	both := waitRunning(t, s, 2)
	if !testkit.UntilEvery(time.Minute, 50*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for h := range both {
			if _, ok := servedBy["hello from "+h]; !ok {
				return false
			}
		}
		return true
	}) {
		l.Stop()
		t.Fatalf("both tasks did not serve within a minute: %v", l.Bodies())
	}
	mu.Lock()
	var second time.Duration
	for h := range both {
		if _, ok := first[h]; !ok {
			second = servedBy["hello from "+h].Sub(step)
		}
	}
	mu.Unlock()
	// The grown pool under load for a while: still 2, never 3.
	served := l.Total()
	testkit.UntilEvery(time.Minute, 50*time.Millisecond, func() bool { return l.Total() >= served+200 })
	if n := specReplicas(t, s); n != 2 {
		t.Errorf("%d replicas under sustained load, want 2 (caddy.max_replicas); Caddy's log:\n%s", n, caddyEvents(s.name))
	}
	l.Stop()
	stopped := time.Now()
	failed, failures := l.Failed()
	if failed != 0 {
		t.Errorf("%d of %d requests failed: %v", failed, l.Total(), failures)
	}
	if !testkit.UntilEvery(after+time.Minute, 100*time.Millisecond, func() bool { return specReplicas(t, s) == 1 }) {
		t.Fatalf("%s not back to 1 replica within %s of the load's end; Caddy's log:\n%s", s.name, after+time.Minute, caddyLog(s.name))
	}
	shrunk := time.Since(stopped)
	waitRunning(t, s, 1)
	if grew := loadWakes(t) - grewBefore; grew != 1 {
		t.Errorf("caddy_dicer_wakes_started_total{cause=\"load\",kind=\"swarm\"} rose by %v, want 1 (the replica added)", grew)
	}
	t.Logf("%d requests, %d failed; load step -> 2 replicas in the spec %s, -> the new task's first answer %s; load's end -> 1 replica %s (caddy.standby_after %s)",
		l.Total(), failed, scaled.Round(time.Millisecond), second.Round(time.Millisecond), shrunk.Round(time.Millisecond), after)
	for _, what := range []string{"one replica more", "one replica less"} {
		if !caddyLogHas(s.name, what) {
			t.Errorf("no info line %q about %s in Caddy's log", what, s.name)
		}
	}
}

// metricsHost is the site of Caddy's metrics.
const metricsHost = "metrics.swarm.test"

// loadWakes is Caddy's count of growths under load on Swarm (R5j).
func loadWakes(t *testing.T) float64 {
	t.Helper()
	status, body, err := get(context.Background(), metricsHost)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET metrics: %d %v", status, err)
	}
	sum := 0.0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "caddy_dicer_wakes_started_total{") && strings.Contains(l, `cause="load"`) && strings.Contains(l, `kind="swarm"`) {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// caddyLogHas reports whether a line of Caddy's log holds both about
// and what.
func caddyLogHas(about, what string) bool {
	out, _ := docker(30*time.Second, "logs", caddyName)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, about) && strings.Contains(l, what) {
			return true
		}
	}
	return false
}

// Swarm refuses a write at a version that is no longer the service's, in
// the words the Scaler reads as "another Caddy was first" (R5j): two
// writes at one inspected version make one change.
func TestSwarmStaleVersionRefused(t *testing.T) {
	s := createService(t, "stale", helloV1, 1, "--label", "caddy.max_replicas=2")
	waitRunning(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sv, _, err := cli.ServiceInspectWithRaw(ctx, s.name, swarm.ServiceInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		spec := sv.Spec
		rep := *spec.Mode.Replicated
		n := uint64(1 + i)
		rep.Replicas = &n
		spec.Mode.Replicated = &rep
		_, err := cli.ServiceUpdate(ctx, sv.ID, sv.Version, spec, swarm.ServiceUpdateOptions{})
		if stale := err != nil && swarmadapter.StaleVersion(err); stale != want || err != nil && !stale {
			t.Fatalf("write %d at version %d: %v; want stale %v", i+1, sv.Version.Index, err, want)
		}
	}
	if n := specReplicas(t, s); n != 1 {
		t.Errorf("%d replicas, want 1: the stale write made no change", n)
	}
}
