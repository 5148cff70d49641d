package engine

// Real apps (docs/realapps.md): the zero-downtime and scale-to-zero tests
// again, through a real Caddy against the real Engine, with real servers
// from Debian's packages instead of the helloserver: nginx (graceful on
// its STOPSIGNAL, SIGQUIT), websocketd, and an app whose port opens long
// before it answers. The image is built here with debootstrap and docker
// import (dockertest.RealAppsImage); `make test-realapps` runs these tests.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// envRealApps runs the real-app tests; `make test-realapps` sets it.
const envRealApps = "CADDY_DICER_REALAPPS"

// realApps returns a client of the Engine and the real-app image, building
// it the first time (debootstrap: root, a few minutes). Without
// CADDY_DICER_REALAPPS the test is skipped.
func realApps(t *testing.T) (*client.Client, string) {
	t.Helper()
	if os.Getenv(envRealApps) == "" {
		t.Skip("needs the real-app image built from Debian packages (debootstrap, root): make test-realapps")
	}
	cli := engine(t)
	ref, err := dockertest.RealAppsImage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cli, ref
}

// nginxApp is a container of the nginx app labelled app=<app>.
func nginxApp(image, name, app string) dockertest.Options {
	return dockertest.Options{Name: name, Image: image, Labels: map[string]string{"app": app}}
}

// 10 start/stop cycles of an nginx beside a stable one, under load: `docker
// stop` sends nginx SIGQUIT, and no request fails. The delays of each
// cycle (start event to first 200, kill to out of rotation) are logged.
func TestRealApps_nginx_start_stop_cycles_lose_no_request(t *testing.T) {
	cli, image := realApps(t)
	app := dockertest.Name("ra-cycle")
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}`, httpPort, app, zeroDowntime))
	dockertest.Start(t, cli, nginxApp(image, "ra-cycle-stable", app))
	l := startLoad(t, hostName("ra-cycle"), 4)
	l.waitServed(t, "ra-cycle-stable", 20*time.Second)
	opts := nginxApp(image, "ra-cycle-churn", app)
	opts.NoStart = true
	c := dockertest.Start(t, cli, opts)
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(filters.Arg("container", c.ID)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const cycles = 10
	for range cycles {
		l.setPhase("start")
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		l.waitServed(t, "ra-cycle-churn", 20*time.Second)
		l.setPhase("stop")
		stopContainer(t, cli, c)
	}
	l.expectNoFailure(t)
	testkit.UntilEvery(5*time.Second, 10*time.Millisecond, func() bool { return ev.Count(events.ActionDie) >= cycles })
	if sig := killSignals(ev.All()); !slices.Equal(slices.Compact(sig), []string{"3"}) {
		t.Errorf("docker stop sent signals %v, want SIGQUIT (3), nginx's graceful stop", sig)
	}
	reportChurnTimes(t, ev.All(), l.answered("ra-cycle-churn"), logTimes(t, logFile, "instance leaves rotation", c.Name))
}

// killSignals returns the signal of each kill event.
func killSignals(evs []events.Message) []string {
	var out []string
	for _, m := range evs {
		if m.Action == events.ActionKill {
			out = append(out, m.Actor.Attributes["signal"])
		}
	}
	return out
}

// A rolling replacement of three nginx containers, one at a time, under
// load: no request fails.
func TestRealApps_nginx_rolling_replacement_loses_no_request(t *testing.T) {
	cli, image := realApps(t)
	app := dockertest.Name("ra-roll")
	churnSite(t, app)
	l := startLoad(t, hostName("ra-roll"), 4)
	var old []dockertest.Container
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("ra-roll-old-%d", i)
		old = append(old, dockertest.Start(t, cli, nginxApp(image, name, app)))
		l.waitServed(t, name, 20*time.Second)
	}
	for i, o := range old {
		name := fmt.Sprintf("ra-roll-new-%d", i+1)
		l.setPhase(fmt.Sprintf("start-new-%d", i+1))
		dockertest.Start(t, cli, nginxApp(image, name, app))
		l.waitServed(t, name, 20*time.Second)
		l.setPhase(fmt.Sprintf("stop-old-%d", i+1))
		stopContainer(t, cli, o)
	}
	l.setPhase("after")
	l.waitTotal(t, l.total()+1000, 2*time.Minute)
	l.expectNoFailure(t)
}

// Drain on SIGQUIT: a slow download from nginx is in flight when the
// container is stopped. The container leaves the rotation at the kill
// event (R6a) while nginx finishes that download whole and only then
// exits; the load beside it loses no request.
func TestRealApps_nginx_drains_on_SIGQUIT(t *testing.T) {
	cli, image := realApps(t)
	app := dockertest.Name("ra-drain")
	host := hostName("ra-drain")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}`, httpPort, app, zeroDowntime))
	// A download of 1 MiB at 64 KiB/s takes 16 s: long enough to be in
	// flight at the stop however slowly the second container starts.
	const slowKB = 1024
	opts := nginxApp(image, "ra-drain-a", app)
	opts.Env = []string{fmt.Sprintf("SLOW_KB=%d", slowKB)}
	stopTimeout := 60
	opts.StopTimeout = &stopTimeout // well past the download
	a := dockertest.Start(t, cli, opts)
	ev := testkit.WatchContainer(t, cli, a.ID)
	answersWithin(t, tester, host, http.StatusOK, hello("ra-drain-a"), 20*time.Second)

	// The only instance gets the download.
	type download struct {
		status int
		body   string
		err    error
		ended  time.Time
	}
	done := make(chan download, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// No client timeout (the tester's is 5 s): ctx's.
		r := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort)}.Get(ctx, host, "/slow")
		done <- download{r.Status, r.Body, r.Err, time.Now()}
	}()
	l := startLoad(t, host, 4)
	l.waitServed(t, "ra-drain-a", 20*time.Second)
	dockertest.Start(t, cli, nginxApp(image, "ra-drain-b", app))
	l.waitServed(t, "ra-drain-b", 20*time.Second)

	l.setPhase("stop-a")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stopped <- cli.ContainerStop(ctx, a.ID, container.StopOptions{})
	}()
	var d download
	select {
	case d = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the slow download did not end within two minutes")
	}
	if err := <-stopped; err != nil {
		t.Fatalf("docker stop: %v", err)
	}
	l.setPhase("after")
	l.waitTotal(t, l.total()+200, time.Minute)
	l.expectNoFailure(t)

	want := hello("ra-drain-a") + strings.Repeat("x", slowKB*1024)
	if d.err != nil || d.status != http.StatusOK || d.body != want {
		t.Fatalf("the download in flight at the stop: status %d, %d bytes (want 200, %d, from ra-drain-a), err %v", d.status, len(d.body), len(want), d.err)
	}
	die, ok2 := ev.Await(events.ActionDie, nil, 5*time.Second)
	kill, ok1 := ev.First(events.ActionKill, nil)
	if !ok1 || !ok2 {
		t.Fatalf("no kill or die event of ra-drain-a: %v", ev.All())
	}
	if sig := killSignals(ev.All()); len(sig) == 0 || sig[0] != "3" {
		t.Errorf("docker stop sent signals %v, want SIGQUIT (3) first", sig)
	}
	if !d.ended.After(kill) {
		t.Errorf("the download ended %s before the kill event: it was not in flight at the stop", kill.Sub(d.ended))
	}
	if die.Before(d.ended.Add(-time.Second)) { // loose: Caddy relays the end a moment later
		t.Errorf("nginx exited %s before the download ended: it did not drain", d.ended.Sub(die))
	}
	var lastSent time.Time
	for _, a := range l.answered("ra-drain-a") {
		if a.sent.After(lastSent) {
			lastSent = a.sent
		}
	}
	t.Logf("kill (SIGQUIT) to the download's end %s, to nginx's exit %s; the last request answered by ra-drain-a was sent %s after the kill",
		d.ended.Sub(kill).Round(time.Millisecond), die.Sub(kill).Round(time.Millisecond), lastSent.Sub(kill).Round(time.Millisecond))
	if lastSent.Sub(kill) > 2*time.Second { // loose: a loaded 2-core machine
		t.Errorf("ra-drain-a answered a request sent %s after its kill event: it stayed in rotation while draining", lastSent.Sub(kill))
	}
}

// A websocket connection through Caddy to websocketd stays open and echoes
// while other instances of its app start and stop; every new connection
// meanwhile is made too.
func TestRealApps_websocket_survives_instances_coming_and_going(t *testing.T) {
	cli, image := realApps(t)
	app := dockertest.Name("ra-ws")
	host := hostName("ra-ws")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		%s
	}
}`, httpPort, app, zeroDowntime))
	wsApp := func(name string) dockertest.Options {
		return dockertest.Options{Name: name, Image: image, Cmd: dockertest.RealAppWebSocket, StopSignal: "SIGTERM",
			Labels: map[string]string{"app": app}}
	}
	caddy := caddyAt(tester)
	dial := func() (*testkit.WebSocket, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, err := caddy.WebSocket(ctx, host, "/")
		if err != nil {
			return nil, "", err
		}
		greeting, err := ws.Receive(10 * time.Second)
		if err != nil {
			ws.Close()
			return nil, "", err
		}
		return ws, greeting, nil
	}
	dockertest.Start(t, cli, wsApp("ra-ws-1"))
	var long *testkit.WebSocket
	testkit.Eventually(t, 20*time.Second, "a websocket to ra-ws-1", func() bool {
		ws, greeting, err := dial()
		if err != nil {
			return false
		}
		if greeting != "hello from ra-ws-1" {
			t.Fatalf("greeting %q, want hello from ra-ws-1", greeting)
		}
		long = ws
		return true
	})
	defer long.Close()
	echo := func(msg string) {
		t.Helper()
		if err := long.Send(msg); err != nil {
			t.Fatalf("the websocket to ra-ws-1: sending %q: %v", msg, err)
		}
		got, err := long.Receive(10 * time.Second)
		if err != nil || got != msg {
			t.Fatalf("the websocket to ra-ws-1: sent %q, got %q, %v", msg, got, err)
		}
	}
	echo("before")
	dials := 0
	for round := 2; round <= 4; round++ {
		name := fmt.Sprintf("ra-ws-%d", round)
		c := dockertest.Start(t, cli, wsApp(name))
		// New connections reach the new instance too.
		reached := testkit.Until(20*time.Second, func() bool {
			ws, greeting, err := dial()
			dials++
			if err != nil {
				t.Errorf("round %d: a new websocket failed: %v", round, err)
				return true
			}
			ws.Close()
			return greeting == "hello from "+name
		})
		if !reached {
			t.Fatalf("no new websocket reached %s within 20s", name)
		}
		echo(fmt.Sprintf("after %s started", name))
		stopContainer(t, cli, c)
		ws, greeting, err := dial()
		dials++
		if err != nil || greeting == "hello from "+name {
			t.Errorf("round %d: a websocket after %s stopped: %q, %v", round, name, greeting, err)
		} else {
			ws.Close()
		}
		echo(fmt.Sprintf("after %s stopped", name))
	}
	t.Logf("one websocket to ra-ws-1 echoed through 3 instances coming and going; %d other connections made", dials)
}

// Scale to zero of nginx, in both standby modes: Caddy puts the idle
// container on standby (stop: SIGQUIT; pause), and the first request
// after wakes it and is answered 200.
func TestRealApps_nginx_scale_to_zero_wake(t *testing.T) {
	for _, mode := range []struct{ name, state string }{{"stop", "exited"}, {"pause", "paused"}} {
		t.Run(mode.name, func(t *testing.T) {
			_, image := realApps(t)
			name := "ra-sb-" + mode.name
			s := newStandbyCase(t, name, dockertest.Options{Image: image,
				Labels: map[string]string{"caddy.standby_after": "1s", "caddy.standby": mode.name}}, "")
			answersWithin(t, s.tester, s.host, http.StatusOK, hello(name), 20*time.Second)
			for round := 1; round <= 3; round++ {
				waitState(t, s.cli, s.c, mode.state, 20*time.Second)
				start := time.Now()
				r := request(s.tester, s.host, 30*time.Second)
				if r.err != nil || r.status != http.StatusOK || r.body != hello(name) {
					t.Fatalf("round %d: the first request to the %s nginx: %s, want 200 %q", round, mode.state, r, hello(name))
				}
				t.Logf("round %d: the first request to the %s nginx answered 200 in %s", round, mode.state, time.Since(start).Round(time.Millisecond))
			}
			if mode.name == "stop" {
				if sig := killSignals(s.ev.All()); len(sig) == 0 || sig[0] != "3" {
					t.Errorf("standby stop sent signals %v, want SIGQUIT (3), nginx's graceful stop", sig)
				}
			}
		})
	}
}

// An app whose port opens 3 s before it answers: with a health check,
// Caddy sends it nothing until the check passes (R1), so no request waits
// for it and none fails. Without one, R1a's probe admits it once its port
// accepts, and the requests sent meanwhile wait until it answers: they
// are held, not failed (logged, to show what a health check is for).
func TestRealApps_slow_to_answer_app_held_out_until_it_answers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health bool
	}{{"with_healthcheck", true}, {"without_healthcheck", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cli, image := realApps(t)
			app := dockertest.Name("ra-slow-" + tc.name[:4])
			churnSite(t, app)
			stable := "ra-slow-" + tc.name[:4] + "-stable"
			dockertest.Start(t, cli, nginxApp(image, stable, app))
			l := startLoad(t, hostName("ra-slow"), 4)
			l.waitServed(t, stable, 20*time.Second)

			name := "ra-slow-" + tc.name[:4] + "-app"
			opts := dockertest.Options{Name: name, Image: image, Cmd: dockertest.RealAppSlow, StopSignal: "SIGTERM",
				Env: []string{"READY_AFTER=3"}, Labels: map[string]string{"app": app}}
			if tc.health {
				opts.Health = dockertest.RealAppSlowHealth(250 * time.Millisecond)
			}
			l.setPhase("slow-starts")
			c := dockertest.Start(t, cli, opts)
			l.waitServed(t, name, 30*time.Second)
			l.setPhase("slow-serves")
			l.waitTotal(t, l.total()+400, time.Minute)
			l.expectNoFailure(t)

			var longest time.Duration
			for _, a := range l.answered(name) {
				longest = max(longest, a.answered.Sub(a.sent))
			}
			early := earlyRequests(t, c)
			t.Logf("%s: %d requests waited in its queue before it answered; the longest answer it gave took %s",
				tc.name, early, longest.Round(time.Millisecond))
			if tc.health && early > 0 {
				t.Errorf("with a health check, Caddy sent %d requests to the app before it answered", early)
			}
		})
	}
}

// earlyRequests is how many requests the slow app logged as read on a
// connection made before it answered, other than its health check's.
func earlyRequests(t *testing.T, c dockertest.Container) int {
	t.Helper()
	out, err := dockertest.Docker(30*time.Second, "logs", c.ID)
	if err != nil {
		t.Fatalf("docker logs %s: %v\n%s", c.Name, err, out)
	}
	return strings.Count(out, "early request from ")
}
