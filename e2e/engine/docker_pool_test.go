package engine

// Pools that grow under load (R5j) and dependencies woken first (R5k),
// through a real Caddy against the real Engine.

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// listeningSince asks the hello server at ip (the address X-Upstream
// shows, in any spelling) when it began to listen, through Caddy: requests
// for up to 10 s, until one goes there.
func listeningSince(t *testing.T, caddy testkit.Caddy, host, ip string) time.Time {
	t.Helper()
	want, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatalf("container address %q: %v", ip, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r := caddy.Get(ctx, host, "/listening")
		cancel()
		// The dial address may be spelt apart from an earlier container's
		// at the same IP (R1d): compare the address, not the text.
		at, err := netip.ParseAddrPort(r.Header.Get("X-Upstream"))
		if r.Err != nil || r.Status != http.StatusOK || err != nil || at.Addr().Unmap() != want {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(r.Body), 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("GET /listening: %s", r)
		}
		return time.Unix(0, n)
	}
	t.Logf("no GET /listening went to %s within 10 s: the routing figure is not known", ip)
	return time.Time{}
}

// loadClient is an HTTP client for hundreds of concurrent requests to
// Caddy: connections are kept, not churned.
func loadClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 500
	tr.MaxIdleConns = 500
	return &http.Client{Transport: tr}
}

// The Done-when of issue 25.1: a pool of 4 containers labelled
// caddy.soft_limit=20, one running (no standby_after) and three on
// standby (standby_after 2s). 10 concurrent clients of a 100 ms
// response wake none; 300 wake the second, which is routable soon after
// it listens (logged), with no failed request; once the load stops, the
// extras are stopped by their own standby_after and one runs.
func TestDocker_R5j_pool_grows_under_load_and_shrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker Engine and Caddy's fixed ports")
	}
	cli := engine(t)
	app := dockertest.Name("pl-grow")
	host := hostName("pl-grow")
	var cs []dockertest.Container
	for i := 1; i <= 4; i++ {
		labels := map[string]string{"app": app, "caddy.soft_limit": "20"}
		opts := dockertest.Options{Name: "pl-grow-" + strconv.Itoa(i), Labels: labels}
		if i > 1 {
			labels["caddy.standby_after"] = "2s"
			opts.NoStart = true
		}
		cs = append(cs, dockertest.Start(t, cli, opts))
	}
	ev := testkit.WatchContainer(t, cli, cs[1].ID)
	var extras []*testkit.Events // the Engine's events of the three on standby, for their stop times
	for _, c := range cs[1:] {
		extras = append(extras, testkit.WatchContainer(t, cli, c.ID))
	}
	tester, logFile := dockerCaddy(t, "", standbySite(app, ""))
	awaitListed(t, app)
	mustGet(t, tester, host, http.StatusOK, hello("pl-grow-1"))

	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: loadClient()}
	const work = 100 * time.Millisecond
	var mu sync.Mutex
	// secondBy and secondFrom bound when pl-grow-2 was first routed to:
	// the earliest end of a request it served less its 100 ms of work,
	// and the earliest start of one.
	var secondBy, secondFrom time.Time
	get := func() testkit.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		began := time.Now()
		r := caddy.Get(ctx, host, "/slow?d="+work.String())
		if r.Is(http.StatusOK, hello("pl-grow-2")) {
			by := time.Now().Add(-work)
			mu.Lock()
			if secondBy.IsZero() || by.Before(secondBy) {
				secondBy = by
			}
			if secondFrom.IsZero() || began.Before(secondFrom) {
				secondFrom = began
			}
			mu.Unlock()
		}
		return r
	}
	ok := func(r testkit.Result) bool {
		return r.Err == nil && r.Status == http.StatusOK && strings.HasPrefix(r.Body, "hello from pl-grow-")
	}

	low := testkit.StartLoad(10, get, ok)
	defer low.Stop()                    // also when the test fails: a load left running would swamp the tests after it
	time.Sleep(1500 * time.Millisecond) // a load that must not grow the pool: 10 in flight, soft limit 20
	if n := ev.Count(events.ActionStart); n != 0 {
		low.Stop()
		t.Fatalf("%d starts of pl-grow-2 with 10 clients under a soft limit of 20", n)
	}
	step := time.Now()
	high := testkit.StartLoad(290, get, ok)
	defer high.Stop()
	grown := testkit.Until(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !secondBy.IsZero()
	})
	time.Sleep(2 * time.Second) // the pool under 300 clients
	var listening time.Time
	if grown {
		listening = listeningSince(t, caddy, host, containerIP(t, cli, cs[1], "bridge"))
	}
	high.Stop()
	low.Stop()
	stopped := time.Now()
	if !grown {
		t.Fatal("pl-grow-2 served nothing within 30 s of 300 clients")
	}
	started, _ := ev.First(events.ActionStart, nil)
	mu.Lock()
	routable, from := secondBy, secondFrom
	mu.Unlock()
	// Under 300 clients on a loaded 2-core machine, answers queue: the
	// first routing to pl-grow-2 is known only between a request's start
	// and its end less its work.
	t.Logf("step to 300 clients -> start of pl-grow-2: %s; its start -> listening: %s; listening -> routed a request: between %s and %s (goal: 20 ms)",
		started.Sub(step).Round(time.Millisecond), listening.Sub(started).Round(time.Millisecond),
		from.Sub(listening).Round(time.Millisecond), routable.Sub(listening).Round(time.Millisecond))
	logGrowth(t, logFile, cs[1].Name, started, listening)
	if d := from.Sub(listening); !listening.IsZero() && d > 15*time.Second { // loose: a loaded 2-core machine
		t.Errorf("no request to pl-grow-2 began within %s of its listening", d)
	}
	failed, first := low.Failed()
	n2, first2 := high.Failed()
	if failed+n2 != 0 {
		t.Errorf("%d of %d requests failed, e.g. %v %v", failed+n2, low.Total()+high.Total(), first, first2)
	}
	t.Logf("served %d requests, by instance %v", low.Total()+high.Total(), mergeCounts(low.Bodies(), high.Bodies()))
	if v := metric(t, "caddy_dicer_wakes_started_total", `kind="docker"`, `cause="load"`); v < 1 {
		t.Errorf("caddy_dicer_wakes_started_total{cause=load} = %v, want at least 1", v)
	}

	// Back to one: each extra stopped by its own standby_after, timed by
	// the Engine's die events (not by when this test got round to look).
	var last time.Time
	for i, c := range cs[1:] {
		waitState(t, cli, c, "exited", 20*time.Second)
		died, ok := extras[i].Await(events.ActionDie, func(m events.Message) bool { return !time.Unix(0, m.TimeNano).Before(stopped) }, 5*time.Second)
		if !ok {
			t.Fatalf("%s exited with no die event after the load stopped", c.Name)
		}
		if died.After(last) {
			last = died
		}
		afterStop := func(m events.Message) bool { return !time.Unix(0, m.TimeNano).Before(stopped) }
		killed, _ := extras[i].First(events.ActionKill, afterStop)
		t.Logf("%s: load stopped -> out of rotation (Caddy's stop call) %s -> signal (kill event) %s -> died %s",
			c.Name, since(stopped, leftRotation(logFile, c.Name, stopped)), since(stopped, killed), since(stopped, died))
	}
	t.Logf("load stopped -> back to 1 running: %s (goal: standby_after 2s + 2s)", last.Sub(stopped).Round(time.Millisecond))
	if d := last.Sub(stopped); d > 2*time.Second+8*time.Second {
		t.Errorf("back to 1 running %s after the load stopped", d)
	}
	waitState(t, cli, cs[0], "running", time.Second)
}

// leftRotation is when Caddy's log says the instance name left its
// rotation at or after from (zero if it does not).
func leftRotation(logFile, name string, from time.Time) time.Time {
	for _, e := range testkit.LogEntries(logFile) {
		ts, _ := e["ts"].(float64)
		at := time.Unix(0, int64(ts*1e9))
		if e["instance"] == name && e["msg"] == "instance leaves rotation" && !at.Before(from) {
			return at
		}
	}
	return time.Time{}
}

// since is b - a, or "?" when either is unknown.
func since(a, b time.Time) string {
	if a.IsZero() || b.IsZero() {
		return "?"
	}
	return b.Sub(a).Round(100 * time.Microsecond).String()
}

// logGrowth logs, from Caddy's log, how the wake of the grown instance
// went: the threshold crossing (Grow's line), the start call's event
// (started), the container listening (its own clock), the readiness
// probe's verdict and its joining the rotation, with the overhead
// (routable less listening, the goal 20 ms). Timings are reported, not
// asserted.
func logGrowth(t *testing.T, logFile, name string, started, listening time.Time) {
	t.Helper()
	at := func(msg string) (time.Time, map[string]any) {
		for _, e := range testkit.LogEntries(logFile) {
			if e["instance"] == name && strings.HasPrefix(fmt.Sprint(e["msg"]), msg) {
				ts, _ := e["ts"].(float64)
				return time.Unix(0, int64(ts*1e9)), e
			}
		}
		return time.Time{}, nil
	}
	crossed, _ := at("every routable instance is past its caddy.soft_limit")
	probed, probe := at("instance accepts connections")
	if t, e := at("woken instance accepts connections"); !t.IsZero() && (probed.IsZero() || t.Before(probed)) {
		probed, probe = t, e // the fast path of a wake's probe decided
	}
	joined, _ := at("instance joins rotation")
	t.Logf("growth of %s: threshold crossing -> start event %s -> listening %s -> probe accepted %s (%v: attempts %v, probing for %v s) -> routable %s; overhead routable - listening: %s (goal 20 ms)",
		name, since(crossed, started), since(started, listening), since(listening, probed), probe["msg"], probe["attempts"], probe["after"],
		since(probed, joined), since(listening, joined))
}

func mergeCounts(a, b map[string]int) map[string]int {
	for k, v := range b {
		a[k] += v
	}
	return a
}

// The Done-when of issue 25.2: two apps depending on one database
// container (caddy.depends_on). Waking app A starts the database first,
// and A's first request succeeds; the database stays up while B serves
// after A went on standby; it goes on standby once both are idle, within
// standby_after + 2 s of B's last request (logged).
func TestDocker_R5k_database_woken_first_and_kept_while_used(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker Engine and Caddy's fixed ports")
	}
	cli := engine(t)
	role := dockertest.Name("pl-db")
	label := func(extra map[string]string) map[string]string {
		l := map[string]string{"caddy.standby_after": "2s"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	db := dockertest.Start(t, cli, dockertest.Options{Name: "pl-db", NoStart: true, Labels: label(map[string]string{"role": role})})
	appA, appB := dockertest.Name("pl-a"), dockertest.Name("pl-b")
	a := dockertest.Start(t, cli, dockertest.Options{Name: "pl-a", NoStart: true,
		Labels: label(map[string]string{"app": appA, "caddy.depends_on": "role=" + role})})
	b := dockertest.Start(t, cli, dockertest.Options{Name: "pl-b", NoStart: true,
		Labels: label(map[string]string{"app": appB, "caddy.depends_on": "role=" + role})})
	dbEv, aEv := testkit.WatchContainer(t, cli, db.ID), testkit.WatchContainer(t, cli, a.ID)
	hostA, hostB := hostName("pl-a"), hostName("pl-b")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	@a host %s
	reverse_proxy @a {
		dynamic docker {
			selector app=%s
			port 8080
		}
	}
	@b host %s
	reverse_proxy @b {
		dynamic docker {
			selector app=%s
			port 8080
		}
	}
}`, httpPort, hostA, appA, hostB, appB))
	awaitListed(t, appA)
	awaitListed(t, appB)

	mustGet(t, tester, hostA, http.StatusOK, hello("pl-a"))
	dbStart, okDB := dbEv.First(events.ActionStart, nil)
	aStart, okA := aEv.First(events.ActionStart, nil)
	if !okDB || !okA || !dbStart.Before(aStart) {
		t.Fatalf("start events: database %v (%v), app A %v (%v); want the database first", dbStart, okDB, aStart, okA)
	}
	t.Logf("database started %s before app A", aStart.Sub(dbStart).Round(time.Millisecond))

	// B serves, A idles: A goes on standby, the database stays up.
	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort)}
	load := testkit.StartLoad(2, func() testkit.Result { return caddy.GetWithin(hostB, 30*time.Second) },
		func(r testkit.Result) bool { return r.Is(http.StatusOK, hello("pl-b")) })
	waitState(t, cli, a, "exited", 15*time.Second)
	time.Sleep(2500 * time.Millisecond) // past the database's own standby_after, B serving
	load.Stop()
	idle := time.Now()
	if failed, first := load.Failed(); failed != 0 || load.Total() == 0 {
		t.Errorf("B: %d of %d failed, e.g. %v", failed, load.Total(), first)
	}
	if n := dbEv.Count(events.ActionStop) + dbEv.Count(events.ActionDie); n != 0 {
		t.Fatalf("the database stopped while B served (%d events)", n)
	}
	waitState(t, cli, db, "exited", 20*time.Second)
	took := time.Since(idle)
	t.Logf("both idle -> database on standby: %s (goal: standby_after 2s + 2s)", took.Round(time.Millisecond))
	if took > 2*time.Second+8*time.Second { // loose: a loaded 2-core machine
		t.Errorf("the database went on standby %s after both apps were idle", took)
	}
	waitState(t, cli, b, "exited", 5*time.Second)
	if v := metric(t, "caddy_dicer_wakes_started_total", `kind="docker"`, `cause="dependency"`); v < 1 {
		t.Errorf("caddy_dicer_wakes_started_total{cause=dependency} = %v, want at least 1", v)
	}
}

// R5k, R5d on the real Engine: a caddy.depends_on reaches the containers
// of its own Compose project only, and their wakes take slots of
// max_wakes (1 here): the project's four databases start one after the
// other in name order, the app last; another project's matching database
// is never started.
func TestDocker_R5k_dependencies_stay_in_their_project(t *testing.T) {
	const chainWake = 60 * time.Second // the route's wake_timeout
	if testing.Short() {
		t.Skip("needs the Docker Engine and Caddy's fixed ports")
	}
	cli := engine(t)
	role := dockertest.Name("dp-db")
	mine, theirs := dockertest.Name("dp-mine"), dockertest.Name("dp-theirs")
	labels := func(project string, kv ...string) map[string]string {
		l := map[string]string{"caddy.standby_after": "1h", "com.docker.compose.project": project}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	var dbs []*testkit.Events
	for i := range 4 {
		db := dockertest.Start(t, cli, dockertest.Options{Name: fmt.Sprintf("dp-db%d", i), NoStart: true,
			Labels: labels(mine, "role", role)})
		dbs = append(dbs, testkit.WatchContainer(t, cli, db.ID))
	}
	other := dockertest.Start(t, cli, dockertest.Options{Name: "dp-other", NoStart: true, Labels: labels(theirs, "role", role)})
	otherEv := testkit.WatchContainer(t, cli, other.ID)
	appName := dockertest.Name("dp-app")
	app := dockertest.Start(t, cli, dockertest.Options{Name: "dp-app", NoStart: true,
		Labels: labels(mine, "app", appName, "caddy.depends_on", "role="+role)})
	appEv := testkit.WatchContainer(t, cli, app.ID)
	host := hostName("dp-app")
	dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	@a host %s
	reverse_proxy @a {
		dynamic docker {
			selector app=%s
			port 8080
			max_wakes 1
			wake_timeout %s
		}
	}
}`, httpPort, host, appName, chainWake))
	awaitListed(t, appName)

	// Five starts one after the other (max_wakes 1), each an Engine call
	// that took 1.1 to 1.4 s on a loaded machine: the request waits as
	// long as Caddy holds it (its wake_timeout), not a test's 5 s.
	if r, retry := getRetry(host, "/", chainWake+5*time.Second); r.err != nil || r.status != http.StatusOK || r.body != hello("dp-app") {
		t.Fatalf("the request that wakes the chain: %s (Retry-After %q), want 200 %q", r, retry, hello("dp-app"))
	}
	appStart, ok := appEv.First(events.ActionStart, nil)
	if !ok {
		t.Fatal("no start event of the app")
	}
	var last time.Time
	for i, ev := range dbs {
		at, ok := ev.First(events.ActionStart, nil)
		if !ok || !at.After(last) || !at.Before(appStart) {
			t.Fatalf("database %d started at %v (%v), previous %v, app %v: want one after the other in name order, before the app",
				i, at, ok, last, appStart)
		}
		last = at
	}
	if n := otherEv.Count(events.ActionStart); n != 0 {
		t.Fatalf("the other project's database was started %d times", n)
	}
	if v := metric(t, "caddy_dicer_wakes_started_total", `kind="docker"`, `cause="dependency"`); v < 4 {
		t.Errorf("caddy_dicer_wakes_started_total{cause=dependency} = %v, want at least 4", v)
	}
}
