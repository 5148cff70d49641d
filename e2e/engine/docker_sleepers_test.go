package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R5l on the real Engine: a few hundred containers of the hello image,
// each with a caddy.host of its own and caddy.standby_after: 3s, routed
// by one `dynamic docker` route on a label they share, served once each
// through Caddy, then left to go on standby. A measurement, not run by
// CI (no timing is asserted; that every container is stopped is):
//
//	CADDY_DICER_SLEEPERS=300 go test -count=1 -timeout 60m -run TestDocker_R5l_sleepers_on_the_Engine -v .
//
// It logs, for N containers: the lateness of each stop past
// standby_after (the Engine's die event less the end of the container's
// one request, less 3 s; the kill event, the start of Caddy's stop, too),
// median / p99 / max; the CPU time of the test process (Caddy runs in it)
// over 5 s while all of them sleep; and the wake of 20 of them, one at a
// time, as TestDocker_Standby_P5_wake_overhead measures it: the request
// to its 200, the container's own part (request to listening, as its
// hello server reports it; the Engine's start event comes about when it
// listens, so request to start event is the Engine's work) and Caddy's
// overhead (listening to the 200 at the client).
func TestDocker_R5l_sleepers_on_the_Engine(t *testing.T) {
	spec := os.Getenv("CADDY_DICER_SLEEPERS")
	if spec == "" {
		t.Skip("a measurement on the Engine: set CADDY_DICER_SLEEPERS=300 (the number of containers)")
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < 20 {
		t.Fatalf("CADDY_DICER_SLEEPERS=%q: want a number of containers, at least 20", spec)
	}
	const (
		standbyAfter = 3 * time.Second
		parallel     = 6 // containers created and served at a time
	)
	cli := engine(t)
	app := dockertest.Name("zz")
	var mu sync.Mutex
	ids := make([]string, n)
	// Removed eight at a time when the test ends, pass or fail, before
	// engine's own cleanup (which would remove them one by one).
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		start := time.Now()
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for _, id := range ids {
			if id == "" {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
					t.Errorf("removing %s: %v", id, err)
				}
			}()
		}
		wg.Wait()
		t.Logf("removed the containers in %s", time.Since(start).Round(time.Millisecond))
	})
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("label", "app="+app)))
	dockerCaddy(t, "", standbySite(app, "wake_timeout 60s"))
	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort)}
	name := func(i int) string { return fmt.Sprintf("zz-%03d", i) }
	host := func(i int) string { return dockertest.Name(name(i)) + ".test" }

	// Created, started and served once each, `parallel` at a time.
	lastEnd := make([]time.Time, n)
	var next atomic.Int64
	failed := make(chan error, parallel)
	var workers sync.WaitGroup
	began := time.Now()
	for range parallel {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				c, err := dockertest.StartContainer(context.Background(), cli, dockertest.Options{Name: name(i),
					Labels: map[string]string{"app": app, "caddy.host": host(i), "caddy.standby_after": standbyAfter.String()}})
				mu.Lock()
				ids[i] = c.ID
				mu.Unlock()
				if err != nil {
					failed <- err
					return
				}
				end, err := serveOnce(caddy, host(i), hello(name(i)))
				if err != nil {
					failed <- err
					return
				}
				lastEnd[i] = end
			}
		}()
	}
	workers.Wait()
	select {
	case err := <-failed:
		t.Fatal(err)
	default:
	}
	t.Logf("%d containers created, started and served once in %s, %d at a time", n, time.Since(began).Round(time.Millisecond), parallel)

	// Every container stopped by Caddy: a die event after its request.
	byID := make(map[string]int, n)
	for i, id := range ids {
		byID[id] = i
	}
	after := func(action events.Action) []time.Time {
		at := make([]time.Time, n)
		for _, m := range ev.All() {
			i, ok := byID[m.Actor.ID]
			if !ok || m.Action != action {
				continue
			}
			if when := time.Unix(0, m.TimeNano); when.After(lastEnd[i]) && at[i].IsZero() {
				at[i] = when
			}
		}
		return at
	}
	all := func(at []time.Time) int {
		k := 0
		for _, a := range at {
			if !a.IsZero() {
				k++
			}
		}
		return k
	}
	if !testkit.Until(2*time.Minute, func() bool { return all(after(events.ActionDie)) == n }) {
		t.Fatalf("%d of %d containers stopped within 2 minutes of their request", all(after(events.ActionDie)), n)
	}
	died, killed := after(events.ActionDie), after(events.ActionKill)
	var late, lateKill []time.Duration
	within := 0
	for i := range n {
		late = append(late, died[i].Sub(lastEnd[i])-standbyAfter)
		if !killed[i].IsZero() {
			lateKill = append(lateKill, killed[i].Sub(lastEnd[i])-standbyAfter)
		}
		if late[i] <= time.Second {
			within++
		}
		if late[i] < -100*time.Millisecond {
			t.Errorf("%s stopped %s before standby_after", name(i), -late[i])
		}
	}
	for i, id := range ids {
		if s := testkit.ContainerState(t, cli, id); s != "exited" {
			t.Errorf("%s is %s, want exited (on standby)", name(i), s)
		}
	}

	// CPU of this process (Caddy in it) while they all sleep.
	var before, now syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	const sleep = 5 * time.Second
	time.Sleep(sleep)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &now)
	cpu := time.Duration(now.Utime.Nano()+now.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond

	// The wake of 20 of them, one at a time.
	rng := rand.New(rand.NewPCG(25, 5))
	picks := rng.Perm(n)[:20]
	var through, toStart, ownStart, overhead []time.Duration
	for _, i := range picks {
		eventually(t, "Caddy's catalog shows "+name(i)+" on standby", func() bool {
			var list []diceradmin.InstanceStatus
			adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
			for _, s := range list {
				if s.Name == dockertest.Name(name(i)) {
					return s.DaemonState == "stopped" && s.State == "standby"
				}
			}
			return false
		})
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r := caddy.Get(ctx, host(i), "/")
		cancel()
		answered := time.Now()
		if !r.Is(http.StatusOK, hello(name(i))) {
			t.Fatalf("wake of %s: %s", name(i), r)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		l := caddy.Get(ctx, host(i), "/listening")
		cancel()
		ns, err := strconv.ParseInt(strings.TrimSpace(l.Body), 10, 64)
		if l.Err != nil || err != nil {
			t.Fatalf("/listening of %s: %s", name(i), l)
		}
		listening := time.Unix(0, ns)
		var started time.Time
		for _, m := range ev.All() {
			if m.Actor.ID == ids[i] && m.Action == events.ActionStart {
				if at := time.Unix(0, m.TimeNano); at.After(sent) {
					started = at
					break
				}
			}
		}
		if started.IsZero() {
			t.Fatalf("no start event for %s after its request", name(i))
		}
		through = append(through, answered.Sub(sent))
		toStart = append(toStart, started.Sub(sent))
		ownStart = append(ownStart, listening.Sub(sent))
		overhead = append(overhead, answered.Sub(listening))
	}

	t.Logf("\n| %d containers, standby_after 3s | median | p99 | max |\n|---|---|---|---|\n"+
		"| stop past standby_after (die event - end of its request - 3 s) | %s | %s | %s |\n"+
		"| Caddy's stop call past standby_after (kill event) | %s | %s | %s |\n\n"+
		"%d of %d stopped within standby_after + 1 s. CPU of the test process (Caddy in it) while all %d sleep: %.1f ms over %s (getrusage; the kernel counts it in ticks of a few ms).\n\n"+
		"| wake of 20, one at a time | median | max |\n|---|---|---|\n"+
		"| request -> 200 | %s | %s |\n"+
		"| request -> Engine start event | %s | %s |\n"+
		"| request -> listening (the container's own start, the Engine's part included) | %s | %s |\n"+
		"| listening -> 200 at the client (Caddy's overhead) | %s | %s |",
		n, round(median(late)), round(pctl(late, 99)), round(slices.Max(late)),
		round(median(lateKill)), round(pctl(lateKill, 99)), round(slices.Max(lateKill)),
		within, n, n, float64(cpu.Microseconds())/1000, sleep,
		round(median(through)), round(slices.Max(through)),
		round(median(toStart)), round(slices.Max(toStart)),
		round(median(ownStart)), round(slices.Max(ownStart)),
		round(median(overhead)), round(slices.Max(overhead)))
}

// serveOnce asks Caddy for host until it answers 200 with body (the
// container's start reaches the catalog by event, then its port must
// accept), within a minute, and returns when that answer was read.
func serveOnce(caddy testkit.Caddy, host, body string) (time.Time, error) {
	deadline := time.Now().Add(time.Minute)
	var last testkit.Result
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = caddy.Get(ctx, host, "/")
		cancel()
		if last.Is(http.StatusOK, body) {
			return time.Now(), nil
		}
		time.Sleep(5 * time.Millisecond) // poll the condition
	}
	return time.Time{}, fmt.Errorf("%s: last answer %s, want 200 %q within a minute", host, last, body)
}

// pctl is the p-th percentile of ds (nearest rank).
func pctl(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
