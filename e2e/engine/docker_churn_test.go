package engine

// Churn without a lost request (R1a, R6): containers come and go under a
// constant load (about 400 requests a second) through a real Caddy, against the real Engine, and every
// request is answered 200. The test app drains on SIGTERM as real apps do:
// it stops accepting at once, finishes the requests in flight, and exits a
// second later (EXIT_DELAY); it binds its port a moment after it starts
// (LISTEN_DELAY).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// appEnv makes the test app start and stop like a real one.
var appEnv = []string{"LISTEN_DELAY=300ms", "EXIT_DELAY=1s"}

// zeroDowntime is the reverse_proxy settings README recommends for deploys
// without a failed request: retry a dial error or a gap with no upstream for
// up to 5s, asking the source again every 50ms.
const zeroDowntime = `lb_try_duration 5s
		lb_try_interval 50ms`

// load sends GET requests for one host to Caddy from several clients, each
// bounded to one request per clientRate, and counts the answers by phase:
// every non-2xx and every error is a failure.
type load struct {
	host string
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	phase   string
	phases  []string
	ok      map[string]int
	failed  map[string][]string // phase -> what failed (the first 10)
	nfailed map[string]int
	bodies  map[string]int // answers by body
	answers map[string][]answer
}

// answer is when a request answered 200 by one app was sent and answered.
type answer struct{ sent, answered time.Time }

func startLoad(t *testing.T, host string, clients int) *load {
	t.Helper()
	l := &load{
		host: host, quit: make(chan struct{}), phase: "start", phases: []string{"start"},
		ok: map[string]int{}, failed: map[string][]string{}, nfailed: map[string]int{},
		bodies: map[string]int{}, answers: map[string][]answer{},
	}
	for range clients {
		l.wg.Add(1)
		go l.run()
	}
	t.Cleanup(l.stop)
	return l
}

// clientRate bounds each load client: at most one request per tick, so
// that four clients send about 400 requests a second (and Caddy's debug
// log stays small enough to read).
const clientRate = 10 * time.Millisecond

func (l *load) run() {
	defer l.wg.Done()
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	tick := time.NewTicker(clientRate)
	defer tick.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-tick.C:
		}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
		req.Host = l.host
		sent := time.Now()
		res, err := c.Do(req)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(res.Body)
			res.Body.Close()
			if err == nil && res.Header.Get(runHeader) != dockertest.RunID() {
				err = errForeign
			}
		}
		l.record(res, string(body), err, sent)
	}
}

func (l *load) record(res *http.Response, body string, err error, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && res.StatusCode/100 == 2 {
		l.ok[l.phase]++
		l.bodies[body]++
		l.answers[body] = append(l.answers[body], answer{sent, time.Now()})
		return
	}
	what := ""
	if err != nil {
		what = err.Error()
	} else {
		what = fmt.Sprintf("%d %q", res.StatusCode, strings.TrimSpace(body))
	}
	l.nfailed[l.phase]++
	if len(l.failed[l.phase]) < 10 {
		l.failed[l.phase] = append(l.failed[l.phase], time.Now().Format("15:04:05.000")+" "+what)
	}
}

// setPhase counts the answers from now on under name.
func (l *load) setPhase(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phase = name
	if !slices.Contains(l.phases, name) {
		l.phases = append(l.phases, name)
	}
}

func (l *load) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	l.wg.Wait()
}

func (l *load) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.phases {
		n += l.ok[p] + l.nfailed[p]
	}
	return n
}

// served reports how many answers came from the app named name.
func (l *load) served(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bodies[hello(name)]
}

// answered returns the requests name answered 200, oldest first.
func (l *load) answered(name string) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.answers[hello(name)])
}

// waitServed waits until name has answered at least once more than it had.
func (l *load) waitServed(t *testing.T, name string, within time.Duration) {
	t.Helper()
	before := l.served(name)
	if !testkit.UntilEvery(within, 5*time.Millisecond, func() bool { return l.served(name) > before }) {
		t.Fatalf("%s answered no request within %s", name, within)
	}
}

// waitTotal waits until at least n requests were answered in all.
func (l *load) waitTotal(t *testing.T, n int, within time.Duration) {
	t.Helper()
	if !testkit.UntilEvery(within, 10*time.Millisecond, func() bool { return l.total() >= n }) {
		t.Fatalf("only %d requests answered within %s, want %d", l.total(), within, n)
	}
}

// expectNoFailure stops the load and fails t if any request failed,
// logging the count of each phase.
func (l *load) expectNoFailure(t *testing.T) {
	t.Helper()
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	total, failed := 0, 0
	for _, p := range l.phases {
		t.Logf("phase %-12s %6d answered 200, %d failed %q", p, l.ok[p], l.nfailed[p], l.failed[p])
		total += l.ok[p] + l.nfailed[p]
		failed += l.nfailed[p]
	}
	t.Logf("%d requests, %d failed", total, failed)
	if failed > 0 {
		t.Errorf("%d of %d requests failed, want none", failed, total)
	}
}

// churnSite starts Caddy on a site routing app=<app> round robin with the
// zero-downtime settings.
func churnSite(t *testing.T, app string) {
	t.Helper()
	dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}`, httpPort, app, zeroDowntime))
}

func stopContainer(t *testing.T, cli *client.Client, c dockertest.Container) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerStop(ctx, c.ID, container.StopOptions{}); err != nil {
		t.Fatalf("docker stop %s: %v", c.Name, err)
	}
}

// R1a: a container without a health check gets no request before its app
// listens: while it starts, requests are answered 503 (no upstream yet),
// never 502 (an upstream that refuses). Without the readiness probe the
// first requests meet the closed port.
func TestDocker_R1a_no_request_before_the_port_accepts(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r1a-ready")
	host := hostName("r1a-ready")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	for round := 1; round <= 3; round++ {
		name := fmt.Sprintf("r1a-ready-%d", round)
		started := time.Now()
		c := dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: map[string]string{"app": app}, Env: []string{"LISTEN_DELAY=500ms"}})
		statuses := map[int]int{}
		for {
			r := request(tester, host, time.Second)
			if errors.Is(r.err, errForeign) {
				t.Fatal(r.err)
			}
			statuses[r.status]++
			if r.err == nil && r.status == http.StatusOK && r.body == hello(name) {
				break
			}
			if time.Since(started) > 10*time.Second {
				t.Fatalf("round %d: no 200 from %s within 10s: %v", round, name, statuses)
			}
			time.Sleep(2 * time.Millisecond) // poll as fast as a client would
		}
		t.Logf("round %d: 200 after %s; answers before it: %v", round, time.Since(started).Round(time.Millisecond), statuses)
		if statuses[http.StatusBadGateway] > 0 {
			t.Errorf("round %d: %d requests got 502 while the app was not listening yet", round, statuses[http.StatusBadGateway])
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		cancel()
		answersWithin(t, tester, host, http.StatusServiceUnavailable, "", changeWithin)
	}
}

// Rolling replacement of a three-container site, one at a time (start the
// new one, wait until it serves, `docker stop` the old one), under constant
// load: no request fails. With and without a HEALTHCHECK.
func TestDocker_churn_rolling_replacement_loses_no_request(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health *container.HealthConfig
	}{
		{"without_healthcheck", nil},
		{"with_healthcheck", dockertest.HealthCheck(200*time.Millisecond, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := engine(t)
			app := dockertest.Name("roll-" + tc.name[:4])
			churnSite(t, app)
			start := func(name string) dockertest.Container {
				return dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: map[string]string{"app": app}, Env: appEnv, Health: tc.health})
			}
			var old []dockertest.Container
			l := startLoad(t, hostName("roll"), 4)
			for i := 1; i <= 3; i++ {
				name := fmt.Sprintf("roll-%s-old-%d", tc.name[:4], i)
				old = append(old, start(name))
				l.waitServed(t, name, 20*time.Second)
			}
			for i, o := range old {
				name := fmt.Sprintf("roll-%s-new-%d", tc.name[:4], i+1)
				l.setPhase(fmt.Sprintf("start-new-%d", i+1))
				start(name)
				l.waitServed(t, name, 20*time.Second)
				l.setPhase(fmt.Sprintf("stop-old-%d", i+1))
				stopContainer(t, cli, o)
			}
			l.setPhase("after")
			l.waitTotal(t, 5000, 2*time.Minute)
			l.expectNoFailure(t)
		})
	}
}

// 20 start/stop cycles of one container beside a stable one, under load:
// no request fails. It also measures, from the Engine's own event times
// and Caddy's log: start event to the first 200 from the container, kill
// event (docker stop's SIGTERM) to the container leaving the rotation and
// to the last request sent there, and die event to out of rotation. These
// are reported, not asserted (timing on a shared machine).
func TestDocker_churn_start_stop_cycles_lose_no_request(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("cycle")
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}`, httpPort, app, zeroDowntime))
	dockertest.Start(t, cli, dockertest.Options{Name: "cycle-stable", Labels: map[string]string{"app": app}, Env: appEnv})
	l := startLoad(t, hostName("cycle"), 4)
	l.waitServed(t, "cycle-stable", 20*time.Second)
	c := dockertest.Start(t, cli, dockertest.Options{Name: "cycle-churn", Labels: map[string]string{"app": app}, Env: appEnv, NoStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(filters.Arg("container", c.ID)))
	evs := ev.All
	for i := 1; i <= 20; i++ {
		l.setPhase("start")
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		l.waitServed(t, "cycle-churn", 20*time.Second)
		l.setPhase("stop")
		stopContainer(t, cli, c)
	}
	l.expectNoFailure(t)
	// The Engine's stream may trail the calls by a moment.
	testkit.UntilEvery(5*time.Second, 10*time.Millisecond, func() bool { return ev.Count(events.ActionDie) >= 20 })
	reportChurnTimes(t, evs(), l.answered("cycle-churn"), logTimes(t, logFile, "instance leaves rotation", c.Name))
}

// logTimes returns the times of Caddy's log entries msg about instance.
func logTimes(t *testing.T, logFile, msg, instance string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, line := range testkit.LogLines(t, logFile, `"msg":"`+msg+`"`, `"instance":"`+instance+`"`) {
		var e struct{ TS float64 }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, time.Unix(0, int64(e.TS*1e9)))
	}
	return out
}

// reportChurnTimes logs, per start/stop cycle, the delays described at
// TestDocker_churn_start_stop_cycles_lose_no_request, as median and max.
func reportChurnTimes(t *testing.T, evs []events.Message, answers []answer, leaves []time.Time) {
	t.Helper()
	at := func(m events.Message) time.Time { return time.Unix(0, m.TimeNano) }
	// next start event after each start: a cycle's leave lies before it.
	var starts []time.Time
	for _, m := range evs {
		if m.Action == events.ActionStart {
			starts = append(starts, at(m))
		}
	}
	cycleEnd := func(start time.Time) time.Time {
		for _, s := range starts {
			if s.After(start) {
				return s
			}
		}
		return time.Now()
	}
	after := func(ts []time.Time, t0 time.Time) (time.Time, bool) {
		for _, x := range ts {
			if !x.Before(t0) && x.Before(cycleEnd(t0)) {
				return x, true
			}
		}
		return time.Time{}, false
	}
	var firstOK, killLeave, killLastSent, dieOut []time.Duration
	var start, kill time.Time
	for _, m := range evs {
		switch m.Action {
		case events.ActionStart:
			start = at(m)
			for _, a := range answers {
				if a.answered.After(start) {
					firstOK = append(firstOK, a.answered.Sub(start))
					break
				}
			}
		case events.ActionKill:
			if kill.After(start) {
				continue // a second signal in one stop
			}
			kill = at(m)
			if leave, ok := after(leaves, start); ok {
				killLeave = append(killLeave, leave.Sub(kill))
			}
		case events.ActionDie:
			die := at(m)
			if leave, ok := after(leaves, start); ok {
				dieOut = append(dieOut, leave.Sub(die))
			}
			// The last request of this run of the container: sent after
			// its start, answered by it, so sent before it died.
			last := start
			for _, a := range answers {
				if a.sent.After(last) && a.sent.Before(die) {
					last = a.sent
				}
			}
			if kill.After(start) {
				killLastSent = append(killLastSent, last.Sub(kill))
			}
		}
	}
	stat := func(what string, ds []time.Duration) {
		if len(ds) == 0 {
			t.Logf("%-40s no sample", what)
			return
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		t.Logf("%-40s median %9s  max %9s  (n=%d)", what, s[len(s)/2].Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond), len(s))
	}
	stat("start event to first 200", firstOK)
	stat("kill event to out of rotation", killLeave)
	stat("kill event to last request sent there", killLastSent)
	stat("die event to out of rotation (<0: before)", dieOut)
}

// A single-container site recreated (`docker rm -f`, then `docker run` with
// the same labels): the requests that meet the gap are held (lb_try_duration)
// and answered by the new container; none fails.
func TestDocker_churn_recreate_gap_is_held_not_failed(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("gap")
	churnSite(t, app)
	old := dockertest.Start(t, cli, dockertest.Options{Name: "gap-old", Labels: map[string]string{"app": app}, Env: appEnv})
	l := startLoad(t, hostName("gap"), 4)
	l.waitServed(t, "gap-old", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= 3; i++ {
		l.setPhase("gap")
		if err := cli.ContainerRemove(ctx, old.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("gap-new-%d", i)
		old = dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: map[string]string{"app": app}, Env: appEnv})
		l.waitServed(t, name, 20*time.Second)
		l.setPhase("served")
		l.waitTotal(t, l.total()+200, time.Minute) // the new container serves for a while
	}
	l.expectNoFailure(t)
}
