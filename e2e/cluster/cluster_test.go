//go:build e2e && linux

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

var httpClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// get sends GET / for host to Caddy and returns the status and body.
func get(ctx context.Context, host string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+caddyAddr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// svc is a service a test made.
type svc struct {
	name, host string
}

// createService creates a service of image with the labels that route
// host to its tasks' port 8080, and removes it when the test ends. extra
// are more `docker service create` flags (--mode global, --replicas 3).
func createService(t *testing.T, name, image string, extra ...string) svc {
	t.Helper()
	s := svc{name: dockertest.Name(name), host: dockertest.Name(name) + ".test"}
	args := []string{
		"service", "create", "--detach", "--no-resolve-image", "--quiet",
		"--name", s.name, "--network", network,
		"--label", "caddy.host=" + s.host, "--label", "caddy.port=8080",
		"--label", "caddy-dicer.test.run=" + dockertest.RunID(),
		"--stop-grace-period", "5s",
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

// task is a running task as the tests see it.
type task struct {
	host string // what its server answers with: its container ID's first 12 characters
	node string // its node's hostname
	ip   string // its address on the test network
	swarm.Task
}

// hostnames maps node IDs to hostnames.
func hostname(nodeID string) string {
	for h, id := range nodeIDs {
		if id == nodeID {
			return h
		}
	}
	return nodeID
}

// tasks returns the service's tasks whose desired state is running, by
// the hostname their server answers with.
func tasks(t *testing.T, s svc) map[string]task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.TaskList(ctx, swarm.TaskListOptions{Filters: filters.NewArgs(
		filters.Arg("service", s.name), filters.Arg("desired-state", "running"))})
	if err != nil {
		t.Fatalf("TaskList: %v", err)
	}
	out := map[string]task{}
	for _, tk := range list {
		id := tk.Status.ContainerStatus
		if id == nil || len(id.ContainerID) < 12 {
			continue
		}
		k := task{host: id.ContainerID[:12], node: hostname(tk.NodeID), Task: tk}
		for _, a := range tk.NetworksAttachments {
			if a.Network.Spec.Name == network && len(a.Addresses) > 0 {
				k.ip, _, _ = strings.Cut(a.Addresses[0], "/")
			}
		}
		out[k.host] = k
	}
	return out
}

// waitRunning waits until the service has n running tasks (on the nodes
// given, if any, one on each) and returns them by hostname.
func waitRunning(t *testing.T, s svc, n int, on ...string) map[string]task {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ts := tasks(t, s)
		running := 0
		var where []string
		for _, tk := range ts {
			if tk.Status.State == swarm.TaskStateRunning && tk.ip != "" {
				running++
				where = append(where, tk.node)
			}
		}
		slices.Sort(where)
		if running == n && len(ts) == n && (on == nil || slices.Equal(where, slices.Sorted(slices.Values(on)))) {
			return ts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d tasks, %d running on %v; want %d on %v", s.name, len(ts), running, where, n, on)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// served sends n requests for s's host and counts the answers by body
// ("hello from <hostname>") and failures.
func served(s svc, n int) (byHost map[string]int, failed int) {
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
// exactly the tasks given (each at least once in a round of requests).
func waitServedBy(t *testing.T, s svc, ts map[string]task, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	want := slices.Sorted(keys(ts))
	for {
		byHost, failed := served(s, 4*len(ts)+4)
		got := slices.Sorted(keys(byHost))
		if failed == 0 && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s served by %v (%d failed), want %v; Caddy's log:\n%s", s.host, byHost, failed, want, caddyLog(s.name))
		}
		time.Sleep(50 * time.Millisecond)
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

// sample is one request of a load.
type sample struct {
	sent time.Time
	took time.Duration
	ok   bool
	by   string // the task that answered
	err  string
}

// load sends requests for host from workers goroutines until end, and
// records each.
type load struct {
	mu      sync.Mutex
	samples []sample
	wg      sync.WaitGroup
	stop    chan struct{}
}

func startLoad(host string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				sent := time.Now()
				status, body, err := get(context.Background(), host)
				sm := sample{sent: sent, took: time.Since(sent), ok: err == nil && status == 200, by: strings.TrimPrefix(body, "hello from ")}
				if !sm.ok {
					sm.err = fmt.Sprintf("%d %q %v", status, body, err)
				}
				l.mu.Lock()
				l.samples = append(l.samples, sm)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// end stops the load and returns its requests in the order sent.
func (l *load) end() []sample {
	close(l.stop)
	l.wg.Wait()
	sort.Slice(l.samples, func(i, j int) bool { return l.samples[i].sent.Before(l.samples[j].sent) })
	return l.samples
}

// count returns how many requests were sent and how many failed, with up
// to 5 of the failures.
func count(samples []sample) (sent, failed int, failures []string) {
	for _, s := range samples {
		if !s.ok {
			failed++
			if len(failures) < 5 {
				failures = append(failures, s.err)
			}
		}
	}
	return len(samples), failed, failures
}

// upstreamFails returns reverse_proxy's recent failures by dial address,
// from Caddy's admin API.
func upstreamFails() (map[string]int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/reverse_proxy/upstreams", nil)
	req.Host = adminHost
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("admin API: %d %s", resp.StatusCode, body)
	}
	var list []struct {
		Address string `json:"address"`
		Fails   int    `json:"fails"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, u := range list {
		out[u.Address] += u.Fails
	}
	return out, nil
}

// dials says whether a dial address is ip (in any of its spellings, R1d).
func dials(addr, ip string) bool {
	return strings.HasPrefix(addr, ip+":") || strings.Contains(addr, ":"+ip+"]")
}

// routableInCatalog says whether the catalog has the task as routable,
// from the plugin's admin API (GET /dicer/instances).
func routableInCatalog(taskID string) (bool, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/dicer/instances", nil)
	req.Host = adminHost
	resp, err := httpClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return false, fmt.Errorf("admin API: %d %s", resp.StatusCode, body)
	}
	var list []struct {
		ID       string `json:"id"`
		Routable bool   `json:"routable"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return false, err
	}
	for _, in := range list {
		if in.ID == taskID {
			return in.Routable, nil
		}
	}
	return false, nil
}

// waitOut waits until the task (at ip) is out of Caddy's rotation: the
// catalog no longer has it routable (the node watch, R11t, or Swarm), or
// reverse_proxy counts a failure for it (with max_fails 1, passive
// health takes it out), whichever comes first, polling every 10ms. It
// returns when, and which.
func waitOut(t *testing.T, tk task, timeout time.Duration) (time.Time, string) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		routable, err := routableInCatalog(tk.ID)
		if err != nil {
			t.Errorf("reading Caddy's instances: %v", err) // not Fatal: run on another goroutine
			return time.Time{}, ""
		}
		if !routable {
			return time.Now(), "catalog"
		}
		fails, err := upstreamFails()
		if err != nil {
			t.Errorf("reading Caddy's upstreams: %v", err)
			return time.Time{}, ""
		}
		for a, n := range fails {
			if dials(a, tk.ip) && n > 0 {
				return time.Now(), "passive health"
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, ""
}

// watchOut polls, from now on, until the task is out of Caddy's rotation
// (see waitOut); the returned function waits for that and gives when and
// which way.
func watchOut(t *testing.T, tk task, timeout time.Duration) func() (time.Time, string) {
	t.Helper()
	type out struct {
		at  time.Time
		how string
	}
	ch := make(chan out, 1)
	go func() {
		at, how := waitOut(t, tk, timeout)
		ch <- out{at, how}
	}()
	return func() (time.Time, string) {
		o := <-ch
		return o.at, o.how
	}
}

// watchCatalog polls, from now on, until the catalog no longer has the
// task routable; the returned function waits for that and gives when
// (zero: not within timeout).
func watchCatalog(taskID string, timeout time.Duration) func() time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if routable, err := routableInCatalog(taskID); err == nil && !routable {
				ch <- time.Now()
				return
			}
		}
		ch <- time.Time{}
	}()
	return func() time.Time { return <-ch }
}

// lastBy returns when the last request answered by host was sent.
func lastBy(samples []sample, host string) time.Time {
	var at time.Time
	for _, s := range samples {
		if s.ok && s.by == host {
			at = s.sent
		}
	}
	return at
}

// slowAfter counts the requests sent after from that took longer than d
// (a dial to the lost node, then a retry elsewhere).
func slowAfter(samples []sample, from time.Time, d time.Duration) (n int, longest time.Duration) {
	for _, s := range samples {
		if s.sent.After(from) && s.took > d {
			n++
			longest = max(longest, s.took)
		}
	}
	return n, longest
}

// nodeState polls the manager for a node's state until it is want, and
// returns when it saw it.
func waitNodeState(t *testing.T, node, want string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, err := docker(10*time.Second, "node", "inspect", node, "--format", "{{.Status.State}}")
		if err == nil && strings.TrimSpace(out) == want {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node %s never %s", node, want)
	return time.Time{}
}

// onNode returns the task on node.
func onNode(t *testing.T, ts map[string]task, node string) task {
	t.Helper()
	for _, tk := range ts {
		if tk.node == node {
			return tk
		}
	}
	t.Fatalf("no task on %s: %v", node, ts)
	return task{}
}

// managerName is the manager's hostname.
func managerName() string {
	for h := range nodeIDs {
		if !strings.HasPrefix(h, "cdt-n") {
			return h
		}
	}
	return ""
}

func everyNode() []string {
	return []string{managerName(), nodeName(1), nodeName(2)}
}

// A global service has a task on each of the three nodes, each reached at
// its own overlay address: an even share by round robin.
func TestClusterTasksOnEveryNode(t *testing.T) {
	s := createService(t, "spread", helloV1, "--mode", "global")
	ts := waitRunning(t, s, 3, everyNode()...)
	waitServedBy(t, s, ts, time.Minute)
	byHost, failed := served(s, 300)
	if failed != 0 {
		t.Fatalf("%d of 300 requests failed", failed)
	}
	for h, n := range byHost {
		if n != 100 {
			t.Errorf("task %s (node %s) got %d of 300 requests, want 100: %v", h, ts[h].node, n, byHost)
		}
	}
}

// rounds is how many times each failure is made.
const rounds = 3

// result is one round of a failure.
type result struct {
	sent, failed int
	out          time.Duration // fault -> out of Caddy's rotation
	swarm        time.Duration // fault -> Swarm marks the node down (0: not waited for)
	back         time.Duration // heal -> first request answered by the node's task again
	watch        time.Duration // fault -> out of the catalog (node watch or Swarm)
	slow         int           // requests after the fault that took > 250ms
	longest      time.Duration
}

func report(t *testing.T, what string, rs []result) {
	t.Helper()
	med := func(f func(result) time.Duration) (time.Duration, time.Duration) {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, f(r))
		}
		slices.Sort(ds)
		return ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond)
	}
	var sent, failed int
	for _, r := range rs {
		sent, failed = sent+r.sent, failed+r.failed
	}
	om, ox := med(func(r result) time.Duration { return r.out })
	sm, sx := med(func(r result) time.Duration { return r.swarm })
	bm, bx := med(func(r result) time.Duration { return r.back })
	wm, wx := med(func(r result) time.Duration { return r.watch })
	line := fmt.Sprintf("SUMMARY %s: %d runs, %d requests, %d failed; fault -> out of rotation median %v max %v", what, len(rs), sent, failed, om, ox)
	if wx > 0 {
		line += fmt.Sprintf(" (out of the catalog median %v max %v)", wm, wx)
	}
	if sx > 0 {
		line += fmt.Sprintf("; fault -> Swarm node down median %v max %v (Traefik, polling Swarm every 15s: that plus up to 15s)", sm, sx)
	}
	if bx > 0 {
		line += fmt.Sprintf("; heal -> served again median %v max %v", bm, bx)
	}
	t.Log(line)
}

// A worker's Engine crashes (its dockerd, containerd and task containers
// killed at once: the node's PID namespace) under load: its task leaves
// Caddy's rotation at the first failed connection to it (passive health,
// R11t), long before Swarm marks the node down, and the requests that
// tried it are retried on the other tasks; Swarm's own view follows.
func TestClusterWorkerCrash(t *testing.T) {
	s := createService(t, "crash", helloV1, "--mode", "global")
	victim := nodeName(1)
	var rs []result
	for round := range rounds {
		ts := waitRunning(t, s, 3, everyNode()...)
		waitServedBy(t, s, ts, time.Minute)
		lost := onNode(t, ts, victim)
		l := startLoad(s.host, 4)
		time.Sleep(300 * time.Millisecond)
		gone := watchOut(t, lost, 30*time.Second)
		dropped := watchCatalog(lost.ID, 30*time.Second)
		fault := time.Now()
		if out, err := nodes(time.Minute, "kill", "1"); err != nil {
			l.end()
			t.Fatalf("killing node 1: %v\n%s", err, out)
		}
		// The kernel takes a moment to end every process of the node's
		// PID namespace and free its network namespaces: until then its
		// connections are refused (an answer, and a dial error Caddy
		// retries elsewhere at once), not dropped.
		teardown := time.Since(fault)
		outAt, how := gone()
		downAt := waitNodeState(t, victim, "down", time.Minute)
		time.Sleep(time.Second)
		samples := l.end()
		r := result{swarm: downAt.Sub(fault)}
		r.sent, r.failed, _ = count(samples)
		_, _, failures := count(samples)
		if outAt.IsZero() {
			t.Errorf("round %d: the crashed node's task %s (%s) never left the rotation", round+1, lost.host, lost.ip)
		} else {
			r.out = outAt.Sub(fault)
		}
		r.slow, r.longest = slowAfter(samples, fault, 250*time.Millisecond)
		t.Logf("round %d: %d requests, %d failed %v; out of rotation (%s) %v after SIGKILL (the kernel took %v to end the node's processes), Swarm saw the node down after %v; %d requests took > 250ms (longest %v); last answer from the lost task sent %v after the crash",
			round+1, r.sent, r.failed, failures, how, r.out.Round(time.Millisecond), teardown.Round(time.Millisecond), r.swarm.Round(time.Millisecond), r.slow, r.longest.Round(time.Millisecond), lastBy(samples, lost.host).Sub(fault).Round(time.Millisecond))
		if at := dropped(); at.IsZero() {
			t.Errorf("round %d: the catalog kept the crashed node's task routable until Swarm", round+1)
		} else {
			// The node watch (R11t) marks it once the node is silent (its
			// connections no longer refused); passive health may have taken
			// it out before, at the first refused connection.
			r.watch = at.Sub(fault)
			t.Logf("round %d: the catalog took the task out %v after SIGKILL, %v after the task's last answer (the node watch, or Swarm if later than %v)",
				round+1, r.watch.Round(time.Millisecond), at.Sub(lastBy(samples, lost.host)).Round(time.Millisecond), r.swarm.Round(time.Millisecond))
		}
		if r.failed != 0 {
			t.Errorf("round %d: %d of %d requests failed (GET: each is retried on another task)", round+1, r.failed, r.sent)
		}
		// The target is 1s after the node's end (measured and logged
		// above); the bound asserted is looser, for a loaded CI machine,
		// and still far below Swarm's own ~12s without the node watch.
		if r.out > teardown+4*time.Second {
			t.Errorf("round %d: out of rotation %v after SIGKILL, want within 4s of the node's end (%v); the target is 1s", round+1, r.out, teardown)
		}
		rs = append(rs, r)
		if out, err := nodes(2*time.Minute, "start", "1"); err != nil {
			t.Fatalf("restarting node 1: %v\n%s", err, out)
		}
		waitNodeState(t, victim, "ready", 2*time.Minute)
	}
	report(t, "worker crash", rs)
}

// A worker cut off the network (its link down) under load: its task
// leaves Caddy's rotation at the first failed connection to it (within
// the dial timeout), not after the ~12s Swarm takes to mark the node
// down; once the link is back it is routed to again as soon as it
// answers (passive health retries it after fail_duration).
func TestClusterWorkerCut(t *testing.T) {
	s := createService(t, "cut", helloV1, "--mode", "global")
	victim := nodeName(2)
	var rs []result
	for round := range rounds {
		ts := waitRunning(t, s, 3, everyNode()...)
		waitServedBy(t, s, ts, time.Minute)
		lost := onNode(t, ts, victim)
		l := startLoad(s.host, 4)
		time.Sleep(300 * time.Millisecond)
		gone := watchOut(t, lost, 30*time.Second)
		dropped := watchCatalog(lost.ID, 10*time.Second)
		if out, err := nodes(time.Minute, "cut", "2"); err != nil {
			l.end()
			t.Fatalf("cutting node 2: %v\n%s", err, out)
		}
		fault := time.Now() // the link is down
		outAt, how := gone()
		droppedAt := dropped()
		// A partition shorter than Swarm's node heartbeat timeout: the
		// task stays Swarm's, and Caddy alone must keep it out.
		time.Sleep(4 * time.Second)
		heal := time.Now()
		if out, err := nodes(time.Minute, "heal", "2"); err != nil {
			l.end()
			t.Fatalf("healing node 2: %v\n%s", err, out)
		}
		var backAt time.Time
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			l.mu.Lock()
			for _, sm := range l.samples {
				if sm.ok && sm.by == lost.host && sm.sent.After(heal) {
					backAt = sm.sent.Add(sm.took)
					break
				}
			}
			l.mu.Unlock()
			if !backAt.IsZero() {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
		samples := l.end()
		r := result{}
		r.sent, r.failed, _ = count(samples)
		_, _, failures := count(samples)
		if outAt.IsZero() {
			t.Errorf("round %d: the cut-off node's task %s (%s) never left the rotation", round+1, lost.host, lost.ip)
		} else {
			r.out = outAt.Sub(fault)
		}
		if droppedAt.IsZero() {
			t.Errorf("round %d: the node watch never took the cut-off node's task out of the catalog", round+1)
		} else {
			r.watch = droppedAt.Sub(fault)
		}
		if backAt.IsZero() {
			t.Errorf("round %d: the node's task %s never served again after the link came back", round+1, lost.host)
		} else {
			r.back = backAt.Sub(heal)
		}
		// Requests the lost task answered during the cut: none may.
		for _, sm := range samples {
			if sm.ok && sm.by == lost.host && sm.sent.After(fault.Add(100*time.Millisecond)) && sm.sent.Add(sm.took).Before(heal) {
				t.Errorf("round %d: the cut-off task answered a request sent %v after the cut", round+1, sm.sent.Sub(fault))
				break
			}
		}
		r.slow, r.longest = slowAfter(samples, fault, 250*time.Millisecond)
		t.Logf("round %d: %d requests, %d failed %v; out of rotation (%s) %v after the cut; served again %v after the link came back; %d requests took > 250ms (longest %v)",
			round+1, r.sent, r.failed, failures, how, r.out.Round(time.Millisecond), r.back.Round(time.Millisecond), r.slow, r.longest.Round(time.Millisecond))
		if r.failed != 0 {
			t.Errorf("round %d: %d of %d requests failed", round+1, r.failed, r.sent)
		}
		// Target 1s (logged above); asserted: before the 4s cut ends,
		// which Swarm alone never reaches.
		if r.out > 3*time.Second {
			t.Errorf("round %d: out of rotation %v after the cut, want within 3s (the target is 1s)", round+1, r.out)
		}
		rs = append(rs, r)
		waitNodeState(t, victim, "ready", time.Minute)
	}
	report(t, "worker cut off for 4s", rs)
}

// `docker node update --availability drain` on a worker under load: its
// task is shut down (announced: it leaves the rotation before it is
// stopped) and replaced on another node, with 0 failed requests.
func TestClusterDrain(t *testing.T) {
	s := createService(t, "drain", helloV1, "--replicas", "3", "--placement-pref", "spread=node.id")
	victim := nodeName(1)
	var rs []result
	for round := range rounds {
		ts := waitRunning(t, s, 3, everyNode()...)
		waitServedBy(t, s, ts, time.Minute)
		drained := onNode(t, ts, victim)
		l := startLoad(s.host, 4)
		time.Sleep(300 * time.Millisecond)
		fault := time.Now()
		if out, err := docker(time.Minute, "node", "update", "--availability", "drain", victim); err != nil {
			l.end()
			t.Fatalf("drain: %v\n%s", err, out)
		}
		var now map[string]task
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			now = tasks(t, s)
			on := 0
			running := 0
			for _, tk := range now {
				if tk.node == victim {
					on++
				}
				if tk.Status.State == swarm.TaskStateRunning {
					running++
				}
			}
			if on == 0 && running == 3 && len(now) == 3 {
				break
			}
			if time.Now().After(deadline) {
				l.end()
				t.Fatalf("the drained node's task was never replaced: %v", now)
			}
		}
		waitServedBy(t, s, now, time.Minute)
		samples := l.end()
		sent, failed, failures := count(samples)
		r := result{sent: sent, failed: failed, out: lastBy(samples, drained.host).Sub(fault)}
		t.Logf("round %d: drain of %s: %d requests, %d failed %v; the drained task's last answer was to a request sent %v after the drain",
			round+1, victim, sent, failed, failures, r.out.Round(time.Millisecond))
		if failed != 0 {
			t.Errorf("round %d: %d of %d requests failed during the drain", round+1, failed, sent)
		}
		rs = append(rs, r)
		if out, err := docker(time.Minute, "node", "update", "--availability", "active", victim); err != nil {
			t.Fatalf("undrain: %v\n%s", err, out)
		}
		// Swarm does not move tasks back: scale away and back to spread them.
		if round < rounds-1 {
			for _, n := range []string{"0", "3"} {
				if out, err := docker(2*time.Minute, "service", "scale", "--detach", s.name+"="+n); err != nil {
					t.Fatalf("scale: %v\n%s", err, out)
				}
			}
		}
	}
	report(t, "drain (out of rotation: the drained task's last answer)", rs)
}

// A rolling update (start-first) whose new tasks may not run where the
// old ones did (the placement constraint flipped with the new image):
// every new task lands on another node than the one it replaces, under
// load, with 0 failed requests. Each round flips the image and the
// constraint: onto cdt-n2 only, then off it.
func TestClusterRollingUpdateElsewhere(t *testing.T) {
	s := createService(t, "roll", helloV1, "--replicas", "2",
		"--constraint", "node.hostname!="+nodeName(2),
		"--update-order", "start-first", "--update-parallelism", "1", "--update-delay", "500ms")
	onN2 := "node.hostname==" + nodeName(2)
	offN2 := "node.hostname!=" + nodeName(2)
	constraint, image := offN2, helloV1
	var rs []result
	for round := range rounds {
		old := waitRunning(t, s, 2)
		waitServedBy(t, s, old, time.Minute)
		oldNodes := map[string]bool{}
		for _, tk := range old {
			oldNodes[tk.node] = true
		}
		next, nextImage := onN2, helloV2
		if constraint == onN2 {
			next, nextImage = offN2, helloV1
		}
		l := startLoad(s.host, 4)
		time.Sleep(300 * time.Millisecond)
		fault := time.Now()
		out, err := docker(5*time.Minute, "service", "update", "--quiet", "--no-resolve-image", "--image", nextImage,
			"--constraint-rm", constraint, "--constraint-add", next, s.name)
		if err != nil {
			l.end()
			t.Fatalf("round %d: docker service update: %v\n%s", round+1, err, out)
		}
		constraint, image = next, nextImage
		var ts map[string]task
		if next == onN2 {
			ts = waitRunning(t, s, 2, nodeName(2), nodeName(2))
		} else {
			ts = waitRunning(t, s, 2)
		}
		waitServedBy(t, s, ts, time.Minute)
		samples := l.end()
		r := result{}
		r.sent, r.failed, _ = count(samples)
		_, _, failures := count(samples)
		for h := range old {
			r.out = max(r.out, lastBy(samples, h).Sub(fault))
		}
		t.Logf("round %d: rolling update onto %s: %d requests, %d failed %v; the last old task's last answer was to a request sent %v after the update began",
			round+1, next, r.sent, r.failed, failures, r.out.Round(time.Millisecond))
		if r.failed != 0 {
			t.Errorf("round %d: %d of %d requests failed during the rolling update", round+1, r.failed, r.sent)
		}
		for h, tk := range ts {
			if tk.Spec.ContainerSpec == nil || tk.Spec.ContainerSpec.Image != image {
				t.Errorf("round %d: task %s runs %v, want %s", round+1, h, tk.Spec.ContainerSpec, image)
			}
			if next == offN2 && tk.node == nodeName(2) || next == onN2 && oldNodes[tk.node] {
				t.Errorf("round %d: new task %s on %s, where an old one ran (%v)", round+1, h, tk.node, oldNodes)
			}
		}
		if r.sent < 100 {
			t.Errorf("round %d: only %d requests under load: the update was not exercised", round+1, r.sent)
		}
		rs = append(rs, r)
	}
	report(t, "rolling update start-first onto other nodes (out of rotation: the last old task's last answer)", rs)
}

// caddyLog returns the lines of Caddy's log that mention about.
func caddyLog(about string) string {
	out, _ := docker(30*time.Second, "logs", caddyName)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, about) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
