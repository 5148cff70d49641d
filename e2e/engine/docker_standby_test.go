package engine

// Scale to zero on Docker, through a real Caddy against the real Engine:
// a request wakes a container labelled caddy.standby_after, Caddy puts it
// on standby when idle, and every way a wake can go wrong ends in a 503
// with Retry-After, never a loop of start calls.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// waitState waits up to d until the Engine says c is in state.
func waitState(t *testing.T, cli *client.Client, c dockertest.Container, state string, d time.Duration) {
	t.Helper()
	testkit.WaitState(t, cli, c.ID, c.Name, state, d)
}

// standbySite is a site routing app=<app> on port 8080, with extra lines
// in the dynamic block.
func standbySite(app, extra string) string {
	return fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker {
			selector app=%s
			port 8080
			%s
		}
		%s
	}
}`, httpPort, app, extra, upstreamHeader)
}

// awaitListed waits until Caddy's catalog has the containers of app
// (labelled app=<app>), as the admin API shows it. The tests share one
// connection to the Engine, already following when their config loads, so
// a container created just before reaches the catalog with its event, a
// moment after the load: a request sent before then finds nothing to wake.
func awaitListed(t *testing.T, app string) {
	t.Helper()
	eventually(t, "Caddy's catalog lists the containers of app="+app, func() bool {
		var list []diceradmin.InstanceStatus
		adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
		return len(list) > 0
	})
}

// getRetry sends GET path for host to Caddy's HTTP port, with its own
// timeout, returning the answer and its Retry-After header.
func getRetry(host, path string, timeout time.Duration) (reply, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort)}.Get(ctx, host, path) // no client timeout: ctx's
	return replyOf(r), r.Header.Get("Retry-After")
}

// standbyCase is what opens most scale-to-zero tests: a container of an app
// of its own, the Engine's events about it, Caddy routing the app with
// standbySite, and Caddy's catalog listing the container.
type standbyCase struct {
	cli     *client.Client
	c       dockertest.Container
	app     string // the container's app label, dockertest.Name(name)
	host    string // a host name for the site, hostName(name)
	ev      *testkit.Events
	tester  *caddytest.Tester
	logFile string
}

// newStandbyCase creates the container name (opts with its Name and an
// app label added) and Caddy with standbySite(app, extra), and waits until
// Caddy's catalog lists the container.
func newStandbyCase(t *testing.T, name string, opts dockertest.Options, extra string) *standbyCase {
	t.Helper()
	s := &standbyCase{cli: engine(t), app: dockertest.Name(name), host: hostName(name)}
	opts.Name = name
	opts.Labels = maps.Clone(opts.Labels)
	if opts.Labels == nil {
		opts.Labels = map[string]string{}
	}
	opts.Labels["app"] = s.app
	s.c = dockertest.Start(t, s.cli, opts)
	s.ev = testkit.WatchContainer(t, s.cli, s.c.ID)
	s.tester, s.logFile = dockerCaddy(t, "", standbySite(s.app, extra))
	awaitListed(t, s.app)
	return s
}

// A burst of 100 concurrent requests for a site whose one container is
// stopped: one start call, 100 answers 200.
func TestDocker_Standby_burst_wakes_once(t *testing.T) {
	s := newStandbyCase(t, "sb-burst", dockertest.Options{NoStart: true,
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "")
	host, ev, tester := s.host, s.ev, s.tester

	const n = 100
	replies := testkit.Burst(n, func() reply { return request(tester, host, 30*time.Second) })
	ok := 0
	for _, r := range replies {
		if r.err == nil && r.status == http.StatusOK && r.body == hello("sb-burst") {
			ok++
		} else if ok == 0 {
			t.Logf("e.g. %s", r)
		}
	}
	if ok != n {
		t.Errorf("%d of %d answered 200", ok, n)
	}
	if got := ev.Count(events.ActionStart); got != 1 {
		t.Errorf("%d start events, want 1", got)
	}
	if v := metric(t, "caddy_dicer_wakes_total", `kind="docker"`, `result="ready"`); v < 1 {
		t.Errorf("caddy_dicer_wakes_total{kind=docker,result=ready} = %v, want at least 1", v)
	}
}

// Idle: with caddy.standby_after=2s the container is stopped about 2 s
// after the last request, and not before; a request in flight (a slow
// response) keeps it up past that; the next request wakes it again.
func TestDocker_Standby_idle_stop_and_in_flight(t *testing.T) {
	s := newStandbyCase(t, "sb-idle", dockertest.Options{NoStart: true,
		Labels: map[string]string{"caddy.standby_after": "2s"}}, "")
	cli, c, host, ev := s.cli, s.c, s.host, s.ev

	woken(t, host, http.StatusOK, hello("sb-idle"))
	last := time.Now()
	waitState(t, cli, c, "exited", 10*time.Second)
	// The Engine's stop starts with a kill event; Podman's sends none, its
	// died (shown unfiltered as die) marks it.
	stop := events.ActionKill
	if os.Getenv("CADDY_DICER_PODMAN") != "" {
		stop = events.ActionDie
	}
	stopped, ok := ev.Await(stop, nil, 5*time.Second)
	if !ok {
		t.Fatalf("%s exited with no %s event within 5 s", c.Name, stop)
	}
	// Caddy's idle clock starts when it routes the request, a moment
	// before this test has the answer.
	if idle := stopped.Sub(last); idle < 1900*time.Millisecond || idle > 5*time.Second {
		t.Errorf("stopped %s after the last request, want about standby_after (2s)", idle)
	} else {
		t.Logf("stopped %s after the last request", idle.Round(time.Millisecond))
	}

	// Woken again. A first request lets Caddy know reverse_proxy's
	// in-flight count for the container's address; then a 5 s response,
	// counted only there, keeps it up well past 2 s.
	woken(t, host, http.StatusOK, hello("sb-idle"))
	r, _ := getRetry(host, "/slow?d=5s", 30*time.Second)
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("slow request: %s", r)
	}
	if got := ev.Count(stop); got != 1 {
		t.Fatalf("%d stops (%s events) by the end of a 5 s response, want 1 (the first idle stop only)", got, stop)
	}
	if got := ev.Count(events.ActionStart); got != 2 {
		t.Errorf("%d starts, want 2", got)
	}
	waitState(t, cli, c, "exited", 10*time.Second)
}

// Pause mode: the idle container is paused, and a request unpauses it.
func TestDocker_Standby_pause_mode_resumes(t *testing.T) {
	s := newStandbyCase(t, "sb-pause", dockertest.Options{
		Labels: map[string]string{"caddy.standby_after": "1s", "caddy.standby": "pause"}}, "")
	cli, c, host, ev, tester := s.cli, s.c, s.host, s.ev, s.tester

	answersWithin(t, tester, host, http.StatusOK, hello("sb-pause"), waitFor)
	for round := 1; round <= 2; round++ {
		waitState(t, cli, c, "paused", 10*time.Second)
		// Counted from here: on a busy machine the container may have
		// been paused and resumed already while answersWithin waited for
		// its first answer (standby_after is 1 s), and the Engine's
		// events reach the watcher later than the state they report: wait
		// until it has the pause just seen (one pause more than unpauses),
		// so an earlier unpause's late event is not counted in this round.
		if !testkit.Until(10*time.Second, func() bool {
			return ev.Count(events.ActionPause) == ev.Count(events.ActionUnPause)+1
		}) {
			t.Fatalf("round %d: the watcher saw %d pause and %d unpause events for a paused container", round,
				ev.Count(events.ActionPause), ev.Count(events.ActionUnPause))
		}
		before := ev.Count(events.ActionUnPause)
		start := time.Now()
		woken(t, host, http.StatusOK, hello("sb-pause"))
		t.Logf("round %d: paused container answered in %s", round, time.Since(start).Round(time.Millisecond))
		// The Engine's event of the unpause may reach the watcher a
		// moment after the answer: wait for it, then count exactly.
		testkit.Until(5*time.Second, func() bool { return ev.Count(events.ActionUnPause) >= before+1 })
		if got := ev.Count(events.ActionUnPause) - before; got != 1 {
			t.Fatalf("round %d: %d unpause events for one request to the paused container, want 1", round, got)
		}
	}
	if got := ev.Count(events.ActionStart); got != 0 {
		t.Errorf("%d start events in pause mode, want 0", got)
	}
}

// A container that exits at once when started is started once, then left
// alone: each request gets 503 with Retry-After at once, and the log says
// why.
func TestDocker_Standby_broken_container_is_not_woken_in_a_loop(t *testing.T) {
	s := newStandbyCase(t, "sb-broken", dockertest.Options{NoStart: true, Env: []string{"PORT=notaport"},
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "")
	host, ev, logFile := s.host, s.ev, s.logFile

	for i := range 20 {
		start := time.Now()
		r, retry := getRetry(host, "/", 30*time.Second)
		if r.err != nil || r.status != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %s, want 503", i, r)
		}
		secs, err := strconv.Atoi(retry)
		if err != nil || secs < 1 {
			t.Fatalf("request %d: Retry-After %q, want a number of seconds", i, retry)
		}
		if i > 0 && time.Since(start) > time.Second {
			t.Errorf("request %d held %s: a failed container's requests must not wait", i, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond) // requests spread over 2 s
	}
	if got := ev.Count(events.ActionStart); got != 1 {
		t.Errorf("%d start events, want 1", got)
	}
	if lines := testkit.LogLines(t, logFile, "wake failed", `"result":"exited"`); len(lines) != 1 {
		t.Errorf("want one log line for the failed wake, got %d: %q", len(lines), lines)
	}
}

// wake_timeout bounds the hold: a container slower than that to accept
// connections gets the request a 503 with Retry-After; it keeps starting,
// and answers a later request.
func TestDocker_Standby_wake_timeout_gives_503_with_retry_after(t *testing.T) {
	s := newStandbyCase(t, "sb-slow", dockertest.Options{NoStart: true, Env: []string{"LISTEN_DELAY=3s"},
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "wake_timeout 500ms")
	host, tester := s.host, s.tester

	start := time.Now()
	r, retry := getRetry(host, "/", 30*time.Second)
	took := time.Since(start)
	if r.err != nil || r.status != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("got %s with Retry-After %q, want 503 with Retry-After", r, retry)
	}
	if took < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("answered after %s, want about wake_timeout (500ms)", took)
	}
	answersWithin(t, tester, host, http.StatusOK, hello("sb-slow"), 10*time.Second)
}

// A read-only socket (a socket proxy that refuses POST): a request for a
// stopped container gets 503 with Retry-After, the error is logged once,
// and the Engine is not asked again and again.
func TestDocker_Standby_read_only_socket(t *testing.T) {
	proxy := dockertest.NewReadOnlyProxy(t) // before engine(t): see TestDocker_Standby_engine_blip_does_not_back_off
	cli := engine(t)
	app := dockertest.Name("sb-ro")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "sb-ro", NoStart: true,
		Labels: map[string]string{"app": app, "caddy.standby_after": "1h"}})
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker {
			address %s
			selector app=%s
			port 8080
		}
	}
}
http://unused.invalid:%d {
	reverse_proxy {
		dynamic docker
	}
}`, httpPort, proxy.Host(), app, httpPort))
	host := hostName("sb-ro")
	for i := range 10 {
		r, retry := getRetry(host, "/", 30*time.Second)
		if r.err != nil || r.status != http.StatusServiceUnavailable || retry == "" {
			t.Fatalf("request %d: %s with Retry-After %q, want 503 with Retry-After", i, r, retry)
		}
	}
	if got := proxy.Refused(); got != 1 {
		t.Errorf("%d writes refused by the proxy, want 1", got)
	}
	if got := testkit.ContainerState(t, cli, c.ID); got != "created" {
		t.Errorf("container is %s", got)
	}
	if lines := testkit.LogLines(t, logFile, "cannot wake instance", "refuses this client"); len(lines) != 1 {
		t.Errorf("want one error line, got %d: %q", len(lines), lines)
	}
}

// The permission allows a stopped labelled container's hosts, so the first
// HTTPS request to it gets a certificate, and wakes it.
func TestDocker_Standby_permission_allows_a_stopped_container(t *testing.T) {
	cli := engine(t)
	host := hostName("sb-tls")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "sb-tls", NoStart: true,
		Labels: map[string]string{"caddy.host": host, "caddy.standby_after": "1h"}})
	dockerCaddy(t, onDemandDockerGlobal, onDemandDockerSite)
	// Caddy's connection may outlive this test's config (the tests of a
	// run share it) and have the container from its create event, which
	// Podman sends late; and a handshake served from the certificate cache
	// of an earlier run (go test -count) asks no permission to wait on.
	awaitState(t, c.Name, "standby")
	// The first handshake may find Caddy's internal issuer still starting.
	for deadline := time.Now().Add(waitFor); ; {
		err := tlsHandshake(host)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handshake for a stopped labelled container's host: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // poll the condition
	}
	if err := tlsHandshake(hostName("sb-nobody")); err == nil {
		t.Fatal("handshake for a host nobody claims succeeded")
	}
	// And the request over it wakes the container.
	httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	client := testkit.HTTPSClient(httpsAddr, nil, 30*time.Second)
	defer client.CloseIdleConnections()
	res, err := client.Get("https://" + host + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(body) != hello("sb-tls") || res.Header.Get(runHeader) != dockertest.RunID() {
		t.Errorf("HTTPS to the stopped container's host: %d %q, want 200 from it, woken", res.StatusCode, body)
	}
}

// Without caddy.standby_after nothing is started: a stopped container's
// route answers the usual bare 503 at once, and no start is made.
func TestDocker_Standby_unlabelled_never_started(t *testing.T) {
	s := newStandbyCase(t, "sb-plain", dockertest.Options{NoStart: true}, "")
	cli, c, ev := s.cli, s.c, s.ev
	r, retry := getRetry(hostName("sb-plain"), "/", 30*time.Second)
	if r.err != nil || r.status != http.StatusServiceUnavailable || retry != "" || r.body != "" {
		t.Fatalf("got %s with Retry-After %q, want a bare 503", r, retry)
	}
	if got := ev.Count(events.ActionStart); got != 0 || testkit.ContainerState(t, cli, c.ID) != "created" {
		t.Errorf("%d start events, state %s: an unlabelled container was started", got, testkit.ContainerState(t, cli, c.ID))
	}
}
