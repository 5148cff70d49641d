//go:build e2e && linux

package swarm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	nettypes "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

var httpClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// get sends GET / for host to Caddy and returns the status and body.
func get(ctx context.Context, host string) (int, string, error) {
	r := testkit.Caddy{Addr: caddyAddr, Client: httpClient}.Get(ctx, host, "/")
	return r.Status, strings.TrimSpace(r.Body), r.Err
}

// svc is a service a test made.
type svc struct {
	name, host string
}

// createService creates a service of image with the labels that route
// host to its tasks' port 8080, and removes it when the test ends. extra
// are more `docker service create` flags.
func createService(t *testing.T, name, image string, replicas int, extra ...string) svc {
	t.Helper()
	return createServiceFor(t, name, dockertest.Name(name)+".test", image, replicas, extra...)
}

// createServiceFor is createService with the host given: several
// services can share one; "" sets no caddy.host label.
func createServiceFor(t *testing.T, name, host, image string, replicas int, extra ...string) svc {
	t.Helper()
	s := svc{name: dockertest.Name(name), host: host}
	args := []string{
		"service", "create", "--detach", "--no-resolve-image", "--quiet",
		"--name", s.name, "--network", network, "--replicas", fmt.Sprint(replicas),
		"--label", "caddy.port=8080",
		"--label", "caddy-dicer.test.run=" + dockertest.RunID(),
		"--stop-grace-period", "5s",
	}
	if host != "" {
		args = append(args, "--label", "caddy.host="+host)
	}
	args = append(append(args, extra...), image)
	if out, err := docker(time.Minute, args...); err != nil {
		t.Fatalf("docker service create: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := docker(time.Minute, "service", "rm", s.name); err != nil {
			t.Errorf("docker service rm %s: %v\n%s", s.name, err, out)
		}
	})
	return s
}

// tasks returns the service's tasks whose desired state is running, by
// the hostname their server answers with (the container ID's first 12
// characters).
func tasks(t *testing.T, s svc) map[string]swarm.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.TaskList(ctx, swarm.TaskListOptions{Filters: filters.NewArgs(
		filters.Arg("service", s.name), filters.Arg("desired-state", "running"))})
	if err != nil {
		t.Fatalf("TaskList: %v", err)
	}
	out := map[string]swarm.Task{}
	for _, tk := range list {
		if id := tk.Status.ContainerStatus; id != nil && len(id.ContainerID) >= 12 {
			out[id.ContainerID[:12]] = tk
		}
	}
	return out
}

// waitRunning waits until the service has n running tasks and returns
// them by hostname.
func waitRunning(t *testing.T, s svc, n int) map[string]swarm.Task {
	t.Helper()
	var ts map[string]swarm.Task
	running := 0
	if !testkit.UntilEvery(time.Minute, 100*time.Millisecond, func() bool {
		ts, running = tasks(t, s), 0
		for _, tk := range ts {
			if tk.Status.State == swarm.TaskStateRunning {
				running++
			}
		}
		return running == n && len(ts) == n
	}) {
		t.Fatalf("%s: %d tasks, %d running; want %d", s.name, len(ts), running, n)
	}
	return ts
}

// served sends n requests for s's host and counts the answers by body
// ("hello from <hostname>") and failures.
func served(t *testing.T, s svc, n int) (byHost map[string]int, failed int) {
	t.Helper()
	byHost = map[string]int{}
	for range n {
		status, body, err := get(context.Background(), s.host)
		if err != nil || status != 200 {
			failed++
			continue
		}
		byHost[strings.TrimPrefix(body, "hello from ")]++
	}
	return byHost, failed
}

// waitServedBy waits until the requests for s's host are answered by
// exactly the hosts given (each at least once in a round of requests).
func waitServedBy(t *testing.T, s svc, hosts map[string]swarm.Task, timeout time.Duration) {
	t.Helper()
	want := slices.Sorted(keys(hosts))
	var byHost map[string]int
	var failed int
	if !testkit.UntilEvery(timeout, 50*time.Millisecond, func() bool {
		byHost, failed = served(t, s, 4*len(hosts)+4)
		return failed == 0 && slices.Equal(slices.Sorted(keys(byHost)), want)
	}) {
		t.Fatalf("%s served by %v (%d failed), want %v; Caddy's log:\n%s", s.host, byHost, failed, want, caddyLog(s.name))
	}
}

func keys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A 3-replica service gets an even share: round robin over its three
// tasks, each reached at its own overlay address.
func TestSwarmEvenShare(t *testing.T) {
	s := createService(t, "even", helloV1, 3)
	ts := waitRunning(t, s, 3)
	waitServedBy(t, s, ts, 30*time.Second)
	byHost, failed := served(t, s, 300)
	if failed != 0 {
		t.Fatalf("%d of 300 requests failed", failed)
	}
	for h, n := range byHost {
		if n != 100 {
			t.Errorf("task %s got %d of 300 requests, want 100 (round robin): %v", h, n, byHost)
		}
	}
}

// `docker service scale` 3 -> 5 -> 1 is followed: the routes serve
// exactly the running tasks after each step.
func TestSwarmScale(t *testing.T) {
	s := createService(t, "scale", helloV1, 3)
	waitServedBy(t, s, waitRunning(t, s, 3), 30*time.Second)
	for _, n := range []int{5, 1} {
		if out, err := docker(2*time.Minute, "service", "scale", "--detach", fmt.Sprintf("%s=%d", s.name, n)); err != nil {
			t.Fatalf("docker service scale: %v\n%s", err, out)
		}
		waitServedBy(t, s, waitRunning(t, s, n), 30*time.Second)
	}
}

// startLoad sends requests for host from workers goroutines until
// stopped, and counts them and the failed ones (an error, or a status
// other than 200).
func startLoad(host string, workers int) *testkit.Load {
	return testkit.StartLoad(workers, func() testkit.Result {
		status, body, err := get(context.Background(), host)
		return testkit.Result{Status: status, Body: body, Err: err}
	}, func(r testkit.Result) bool { return r.Is(http.StatusOK, "") })
}

// `docker service update` rolling to a new image version, start-first
// (each new task runs before the one it replaces is shut down), under
// load: not one request fails, and the new tasks alone serve at the end.
func TestSwarmRollingUpdate(t *testing.T) {
	s := createService(t, "roll", helloV1, 3,
		"--update-order", "start-first", "--update-parallelism", "1", "--update-delay", "500ms")
	waitServedBy(t, s, waitRunning(t, s, 3), 30*time.Second)
	l := startLoad(s.host, 4)
	out, err := docker(5*time.Minute, "service", "update", "--quiet", "--no-resolve-image", "--image", helloV2, s.name)
	if err != nil {
		l.Stop()
		t.Fatalf("docker service update: %v\n%s", err, out)
	}
	ts := waitRunning(t, s, 3)
	waitServedBy(t, s, ts, 30*time.Second)
	l.Stop()
	total := l.Total()
	failed, failures := l.Failed()
	t.Logf("%d requests during the rolling update, %d failed", total, failed)
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the rolling update: %v", failed, total, failures)
	}
	for h, tk := range ts {
		if tk.Spec.ContainerSpec == nil || tk.Spec.ContainerSpec.Image != helloV2 {
			t.Errorf("task %s runs %v, want %s", h, tk.Spec.ContainerSpec, helloV2)
		}
	}
	if total < 100 {
		t.Errorf("only %d requests under load: the update was not exercised", total)
	}
}

// A service with a health check is gated by it: its running task, whose
// port accepts connections (the readiness probe alone would admit it),
// gets no requests while its check fails; once a healthy version runs, it
// does.
func TestSwarmHealthGate(t *testing.T) {
	began := time.Now()
	s := createService(t, "health", helloHC, 1, "--env", "HEALTH=bad")
	// The task's container runs and serves, but is not healthy.
	var out string
	if !testkit.UntilEvery(time.Minute, 100*time.Millisecond, func() bool {
		out, _ = docker(30*time.Second, "ps", "--filter", "label=com.docker.swarm.service.name="+s.name,
			"--filter", "status=running", "--format", "{{.Status}}")
		return strings.Contains(out, "health: starting") || strings.Contains(out, "unhealthy")
	}) {
		t.Fatalf("no running task container of %s: %q", s.name, out)
	}
	t.Logf("%v: the task container runs, unhealthy", time.Since(began))
	// Each 503 comes after lb_try_duration (5s) of finding no routable
	// task: three of them cover 15s of the task failing its check.
	for i := range 3 {
		if status, body, err := get(context.Background(), s.host); err != nil || status != 503 {
			t.Fatalf("request %d while unhealthy: %d %q %v, want 503", i, status, body, err)
		}
	}
	t.Logf("%v: 503 while unhealthy; updating to a healthy version", time.Since(began))
	if out, err := docker(2*time.Minute, "service", "update", "--detach", "--quiet", "--env-rm", "HEALTH", s.name); err != nil {
		t.Fatalf("docker service update: %v\n%s", err, out)
	}
	ts := waitRunning(t, s, 1)
	t.Logf("%v: the healthy task runs", time.Since(began))
	waitServedBy(t, s, ts, time.Minute)
}

// The permission allows a certificate for a service's hosts (Caddy's
// internal CA, on demand), whatever the state of its tasks (a service
// scaled to zero too), and for no other name.
func TestSwarmPermission(t *testing.T) {
	s := createService(t, "perm", helloV1, 1)
	idle := createService(t, "perm-idle", helloV1, 0)
	waitServedBy(t, s, waitRunning(t, s, 1), 30*time.Second)
	handshake := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cert, err := testkit.Handshake(ctx, tlsAddr, name, nil)
		if err != nil {
			return err
		}
		if cn := cert.DNSNames; !slices.Contains(cn, name) {
			return fmt.Errorf("certificate for %v", cn)
		}
		return nil
	}
	if err := handshake(s.host); err != nil {
		t.Errorf("a certificate for the service's host %s: %v", s.host, err)
	}
	if err := handshake(idle.host); err != nil {
		t.Errorf("a certificate for the host %s of a service scaled to zero: %v", idle.host, err)
	}
	if err := handshake(dockertest.Name("nobody") + ".test"); err == nil {
		t.Error("a certificate for a host no service claims was issued")
	}
}

// With endpoint vip the service's virtual IP on the network is the one
// upstream. Swarm's VIPs need IPVS in the kernel; where it has it, new
// connections reach both tasks. Where not (this project's test machine),
// the VIP answers nothing, and the test checks that Caddy sends the
// service's requests to the VIP, and nowhere else.
func TestSwarmVIP(t *testing.T) {
	s := createService(t, "vip", helloV1, 2)
	ts := waitRunning(t, s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	service, _, err := cli.ServiceInspectWithRaw(ctx, s.name, swarm.ServiceInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nw, err := cli.NetworkInspect(ctx, network, nettypes.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vip string
	for _, v := range service.Endpoint.VirtualIPs {
		if v.NetworkID == nw.ID {
			vip, _, _ = strings.Cut(v.Addr, "/")
		}
	}
	if vip == "" {
		t.Fatalf("%s has no VIP on %s: %+v", s.name, network, service.Endpoint.VirtualIPs)
	}
	fresh := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	request := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+vipAddr+"/", nil)
		req.Host = s.host
		resp, err := fresh.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimPrefix(strings.TrimSpace(string(body)), "hello from ")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Logf("no IPVS in this kernel (%v): Swarm's VIPs answer nothing here; checking where Caddy sends the requests", err)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(caddyLog(s.host), `"upstream":"`+vip+`:8080"`) {
			if time.Now().After(deadline) {
				t.Fatalf("Caddy never sent a request for %s to the VIP %s:8080; its log:\n%s", s.host, vip, caddyLog(s.host))
			}
			request()
		}
		for _, line := range strings.Split(caddyLog(s.host), "\n") {
			if strings.Contains(line, `"upstream":"`) && !strings.Contains(line, `"upstream":"`+vip+`:8080"`) {
				t.Errorf("a request for %s went elsewhere than the VIP: %s", s.host, line)
			}
		}
		return
	}
	seen := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 2 {
		if status, body := request(); status == 200 {
			seen[body]++
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the VIP, served by %v; want both tasks %v; Caddy's log:\n%s", seen, slices.Sorted(keys(ts)), caddyLog(s.host))
		}
	}
	for h := range seen {
		if _, ok := ts[h]; !ok {
			t.Errorf("served by %s, not a task of %s", h, s.name)
		}
	}
}

// ---- item 4: how long a Swarm change takes to reach the route -------------

// firstServed sends requests for s's host back to back until one is
// answered by host, and returns when.
func firstServed(t *testing.T, s svc, host string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		_, body, err := get(context.Background(), s.host)
		if err == nil && strings.TrimPrefix(body, "hello from ") == host {
			return time.Now()
		}
	}
	t.Fatalf("%s never served by %s", s.host, host)
	return time.Time{}
}

// TestSwarmChangeToRoute measures, 10 times each, how long a new task
// takes to get requests once Swarm reports it running (scale up by one),
// and how long a task being scaled away keeps getting new requests after
// the scale command returns (scale down by one), against Traefik's 15 s
// poll of Swarm.
func TestSwarmChangeToRoute(t *testing.T) {
	s := createService(t, "measure", helloV1, 2, "--stop-grace-period", "2s")
	waitServedBy(t, s, waitRunning(t, s, 2), 30*time.Second)
	var up, down, command []time.Duration
	for i := range 10 {
		before := waitRunning(t, s, 2)
		if out, err := docker(time.Minute, "service", "scale", "--detach", s.name+"=3"); err != nil {
			t.Fatalf("scale up: %v\n%s", err, out)
		}
		var added string
		var addedTask swarm.Task
		deadline := time.Now().Add(time.Minute)
		for added == "" {
			for h, tk := range tasks(t, s) {
				if _, old := before[h]; !old && tk.Status.State == swarm.TaskStateRunning {
					added, addedTask = h, tk
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the new task never ran")
			}
		}
		at := firstServed(t, s, added, 30*time.Second)
		up = append(up, at.Sub(addedTask.Status.Timestamp))

		// Scale down: Swarm picks the task to stop and sends its container
		// SIGTERM (the kill event, whose time is recorded); the last
		// request the task gets is sent before the route drops it.
		three := waitRunning(t, s, 3)
		kills := watchKills(t, s)
		start := time.Now()
		if out, err := docker(time.Minute, "service", "scale", "--detach", s.name+"=2"); err != nil {
			t.Fatalf("scale down: %v\n%s", err, out)
		}
		issued := time.Now()
		last := map[string]time.Time{}
		var gone string
		for gone == "" && time.Since(start) < 30*time.Second {
			sent := time.Now()
			_, body, err := get(context.Background(), s.host)
			if err == nil {
				last[strings.TrimPrefix(body, "hello from ")] = sent
			}
			now := tasks(t, s)
			for h := range three {
				if _, ok := now[h]; !ok {
					gone = h
				}
			}
		}
		if gone == "" {
			t.Fatal("no task was scaled away")
		}
		// Keep sending for a second, to see any request it still gets.
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			sent := time.Now()
			if _, body, err := get(context.Background(), s.host); err == nil {
				last[strings.TrimPrefix(body, "hello from ")] = sent
			}
		}
		after := func(from time.Time) time.Duration {
			if d := last[gone].Sub(from); !last[gone].IsZero() && d > 0 {
				return d
			}
			return 0 // none after it
		}
		killed := kills(gone)
		if killed.IsZero() {
			t.Fatalf("no kill event for the scaled-away task %s", gone)
		}
		down = append(down, after(killed))
		command = append(command, after(issued))
		t.Logf("round %d: new task routed %v after Swarm reported it running; the scaled-away task's last request was sent %v after its kill, %v after the scale command returned (Swarm killed it %v after)",
			i+1, up[len(up)-1].Round(time.Millisecond), down[len(down)-1].Round(time.Millisecond),
			command[len(command)-1].Round(time.Millisecond), killed.Sub(issued).Round(time.Millisecond))
	}
	report := func(what string, ds []time.Duration) {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("%s: median %v, max %v (of %d); Traefik's Swarm provider polls every 15s: up to 15s, 7.5s on average",
			what, ((ds[4] + ds[5]) / 2).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
	}
	report("scale up, task running -> routed", up)
	report("task stop, its container's kill event -> last request sent to it", down)
	report("scale down, command returned -> last request sent to the stopped task", command)
}

// watchKills records the time of the first kill event of each task
// container of s from now on, until the test ends; the returned function
// gives it for a hostname (the container ID's first 12 characters), or
// zero. It waits up to 5s for an event not yet seen.
func watchKills(t *testing.T, s svc) func(host string) time.Time {
	t.Helper()
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(
		filters.Arg("type", "container"), filters.Arg("event", "kill"),
		filters.Arg("label", "com.docker.swarm.service.name="+s.name)))
	return func(host string) time.Time {
		var at time.Time
		testkit.UntilEvery(5*time.Second, 10*time.Millisecond, func() bool {
			at, _ = ev.First(events.ActionKill, func(m events.Message) bool {
				return len(m.Actor.ID) >= 12 && m.Actor.ID[:12] == host
			})
			return !at.IsZero()
		})
		return at
	}
}

// caddyLog returns the lines of Caddy's log that mention about, for a
// failure's message.
func caddyLog(about string) string { return caddyLogLines(about, false) }

// caddyEvents is caddyLog without the lines of each request's round trip:
// what Caddy said about the instances and its decisions.
func caddyEvents(about string) string { return caddyLogLines(about, true) }

// caddyLogLines is caddyLog, without the round trips' lines if quiet.
func caddyLogLines(about string, quiet bool) string {
	out, _ := docker(30*time.Second, "logs", caddyName)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if quiet && strings.Contains(l, `"msg":"upstream roundtrip"`) {
			continue // one per request: the lines about the instances are what tell
		}
		if strings.Contains(l, about) || strings.Contains(l, "swarm") && strings.Contains(l, "\"error\"") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
