package engine

// In-process Caddy tests (caddytest) of the Docker Engine modules against
// the machine's real Docker Engine: a real Caddy, with the plugin compiled
// in, answers real HTTP(S) requests on 127.0.0.1 by proxying to containers
// that each test creates from the repository's own test image
// (internal/dockertest). Caddy reaches the containers on their own
// addresses, on networks the tests create or on the default bridge; the
// tests themselves send requests only to Caddy and to 127.0.0.1-published
// ports of their own containers.
//
// Every container carries a label value unique to its test (app=<Name>),
// and every host name carries the run ID, so other containers on the Engine
// never match. The Engine is required: without it these tests fail.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// changeWithin bounds how long a container change may take to show in
// Caddy's answers (R6, R11: one event, no reload).
const changeWithin = time.Second

// engine returns a client of the Docker Engine (failing t when there is
// none: the project requires it), with the test image built, and removes
// every container and network of this run when t ends, pass or fail.
func engine(t *testing.T) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Docker Engine, and " + caddyOnFixedPorts + ": run without -short (make test)")
	}
	needsCaddy(t)
	cli := dockertest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dockertest.BuildImage(ctx, cli); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			t.Errorf("removing the run's containers: %v", err)
		}
		forgotten(t)
	})
	return cli
}

// forgotten waits until no connection to an Engine in this process lists
// a container of this run (all removed by then). The connections outlive
// a test: a test run again in the same process (go test -count) names its
// containers and labels as the run before did, and a catalog that has not
// yet followed the removal events of the run before would give the new
// run's selectors the old, removed containers too.
func forgotten(t *testing.T) {
	t.Helper()
	ours := func(labels map[string]string) bool { return labels[dockertest.RunLabel] == dockertest.RunID() }
	var left []string
	first := true
	if !testkit.Until(time.Minute, func() bool {
		left = left[:0]
		for _, c := range dicerapp.Connections() {
			for _, st := range c.Catalog().Instances(ours) {
				left = append(left, st.Name)
			}
		}
		if first && len(left) > 0 {
			t.Logf("Caddy still lists the removed containers %q: waiting until it follows their removal", left)
		}
		first = false
		return len(left) == 0
	}) {
		t.Errorf("a minute after their removal, Caddy still lists the run's containers %q", left)
	}
}

// runHeader is the response header by which this process's Caddy signs
// every answer of a docker test's sites.
const runHeader = "X-Test-Run"

// errForeign is an answer without this process's runHeader: another test
// process's Caddy answered.
var errForeign = errors.New("answered by a Caddy that is not this test process's " +
	"(another `go test` of this package shares the fixed admin, HTTP and HTTPS ports)")

// siteOpener is a line that opens a site block: unindented, ending in "{".
var siteOpener = regexp.MustCompile(`(?m)^(\S[^\n]*) \{$`)

// dockerCaddy starts Caddy on the given global options and sites, each
// site signing its answers with runHeader, and returns the tester and
// Caddy's log file. It fails t when the config did not reach this
// process's Caddy: caddytest loads it into whatever Caddy listens on the
// admin port, and Caddy's listeners share their ports (SO_REUSEPORT), so a
// concurrent test process of this package would otherwise answer in its
// place.
func dockerCaddy(t *testing.T, globals, sites string) (*caddytest.Tester, string) {
	t.Helper()
	sites = siteOpener.ReplaceAllString(sites, "$1 {\n\theader "+runHeader+" "+dockertest.RunID())
	tester, logFile := startCaddy(t, globals, sites)
	if t.Failed() {
		t.FailNow()
	}
	if dicerapp.Holders(openConnection("docker", "")) == 0 {
		t.Fatalf("the config did not reach this process's Caddy (no module here uses the Engine): " +
			"is another `go test` of this package running? Its Caddy holds the admin port")
	}
	return tester, logFile
}

// upstreamHeader makes each proxied response say where Caddy sent it.
const upstreamHeader = "header_down X-Upstream {http.reverse_proxy.upstream.hostport}"

// reply is one answer from Caddy.
type reply struct {
	status   int
	body     string
	upstream string // X-Upstream, where Caddy sent the request
	err      error
}

func (r reply) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("%d %q (upstream %q)", r.status, r.body, r.upstream)
}

// request sends GET / for host to Caddy's HTTP port, giving up after
// timeout (a request that reaches a paused container never returns).
func request(tester *caddytest.Tester, host string, timeout time.Duration) reply {
	return replyOf(caddyAt(tester).GetWithin(host, timeout))
}

// replyOf is r as a reply, an error if this process's Caddy did not sign
// it (runHeader).
func replyOf(r testkit.Result) reply {
	if r.Err == nil && r.Header.Get(runHeader) != dockertest.RunID() {
		r.Err = errForeign
	}
	return reply{status: r.Status, body: r.Body, upstream: r.Header.Get("X-Upstream"), err: r.Err}
}

// answersWithin waits up to d until a request for host gets status (and,
// if body is not empty, that body), and returns that answer and how long it
// took. Each request gives up at the deadline, or after 100 ms so that one
// sent before a change does not hold the wait.
func answersWithin(t *testing.T, tester *caddytest.Tester, host string, status int, body string, d time.Duration) (reply, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	var last reply
	for {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			t.Fatalf("host %s: last answer %s; want %d %q within %s", host, last, status, body, d)
		}
		last = request(tester, host, min(remaining, 100*time.Millisecond))
		if errors.Is(last.err, errForeign) {
			t.Fatalf("host %s: %v", host, last.err)
		}
		if last.err == nil && last.status == status && (body == "" || last.body == body) {
			return last, time.Since(start)
		}
		time.Sleep(5 * time.Millisecond) // poll the condition
	}
}

// mustGet sends one request and fails t unless it gets status (and body,
// if not empty).
func mustGet(t *testing.T, tester *caddytest.Tester, host string, status int, body string) reply {
	t.Helper()
	r := request(tester, host, waitFor)
	if r.err != nil || r.status != status || (body != "" && r.body != body) {
		t.Fatalf("host %s: got %s, want %d %q", host, r, status, body)
	}
	return r
}

// woken sends a request that wakes host's container, and wants status
// and body. It waits as long as Caddy holds a request for a wake (the
// default wake_timeout, 30 s), not waitFor: the Engine's start of a
// container took over 4 s on a loaded machine. A wake that never comes
// still fails it: Caddy answers 503 at wake_timeout.
func woken(t *testing.T, host string, status int, body string) reply {
	t.Helper()
	r, retry := getRetry(host, "/", standby.DefaultWakeTimeout+5*time.Second)
	if r.err != nil || r.status != status || (body != "" && r.body != body) {
		t.Fatalf("host %s: got %s (Retry-After %q), want %d %q", host, r, retry, status, body)
	}
	return r
}

// containerIP is c's address on the named network ("" for the default
// bridge).
func containerIP(t *testing.T, cli *client.Client, c dockertest.Container, network string) string {
	t.Helper()
	return testkit.ContainerIP(t, cli, c.ID, network)
}

// waitHealth waits until the Engine reports c's health as want.
func waitHealth(t *testing.T, cli *client.Client, c dockertest.Container, want string) {
	t.Helper()
	testkit.WaitHealth(t, cli, c.ID, c.Name, want, waitFor)
}

// answeredBy sends requests for host until n different bodies have been
// answered 200, and returns where Caddy sent each (X-Upstream).
func answeredBy(t *testing.T, tester *caddytest.Tester, host string, n int) map[string]string {
	t.Helper()
	seen := map[string]string{}
	eventually(t, fmt.Sprintf("%d instances answer %s", n, host), func() bool {
		r := request(tester, host, waitFor)
		if errors.Is(r.err, errForeign) {
			t.Fatal(r.err)
		}
		if r.err == nil && r.status == http.StatusOK {
			seen[r.body] = r.upstream
		}
		return len(seen) == n
	})
	return seen
}

// hostName is a host name unique to this run.
func hostName(prefix string) string { return prefix + "-" + dockertest.RunID() + ".example.com" }

// R2 (selector route) and R11: three running containers matching the
// route's selector share its requests evenly under round_robin.
func TestDocker_R2_three_containers_share_a_site_evenly(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r2-even")
	names := []string{"r2-even-1", "r2-even-2", "r2-even-3"}
	for _, n := range names {
		dockertest.Start(t, cli, dockertest.Options{Name: n, Labels: map[string]string{"app": app}})
	}
	// A container of another app is not part of the site.
	dockertest.Start(t, cli, dockertest.Options{Name: "r2-even-other", Labels: map[string]string{"app": app + "-other"}})
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}`, httpPort, app, upstreamHeader))
	host := hostName("even")

	// Wait until the three answer (each serves once its process listens).
	answeredBy(t, tester, host, 3)
	counts := map[string]int{}
	for range 30 {
		r := mustGet(t, tester, host, http.StatusOK, "")
		counts[r.body]++
	}
	for _, n := range names {
		if counts[hello(n)] != 10 {
			t.Errorf("%s got %d of 30 requests, want 10 (all: %v)", n, counts[hello(n)], counts)
		}
	}
	if counts[hello("r2-even-other")] != 0 {
		t.Errorf("a container of another app got requests: %v", counts)
	}
}

// R2 (no selector): a container serves the hosts of its caddy.host label,
// matched ignoring case, a port and a trailing dot; a host nobody claims
// gets 503 even while unlabelled containers run.
func TestDocker_R2_host_label_routing_without_selector(t *testing.T) {
	cli := engine(t)
	shop, www, blog := hostName("shop"), "www."+hostName("shop"), hostName("blog")
	dockertest.Start(t, cli, dockertest.Options{Name: "r2-shop", Labels: map[string]string{"caddy.host": shop + ", " + www}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2-blog", Labels: map[string]string{"caddy.host": blog}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2-unlabelled", Labels: map[string]string{"app": dockertest.Name("r2-unlabelled")}})
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
		}
	}
}`, httpPort))

	answersWithin(t, tester, shop, http.StatusOK, hello("r2-shop"), waitFor)
	answersWithin(t, tester, blog, http.StatusOK, hello("r2-blog"), waitFor)
	for host, want := range map[string]string{
		shop:                      hello("r2-shop"),
		strings.ToUpper(shop):     hello("r2-shop"),
		"Www." + hostName("SHOP"): hello("r2-shop"),
		shop + ":9080":            hello("r2-shop"),
		blog:                      hello("r2-blog"),
		"BLOG-" + dockertest.RunID() + ".Example.Com:1234": hello("r2-blog"),
	} {
		mustGet(t, tester, host, http.StatusOK, want)
	}
	// R2b: a trailing dot is not ignored in a request's Host, as Caddy's
	// host matcher does not ignore it.
	for _, host := range []string{hostName("nobody"), "127.0.0.1", "shop.example.com", "sub." + shop, www + ".", strings.ToUpper(www) + ".:9080"} {
		mustGet(t, tester, host, http.StatusServiceUnavailable, "")
	}
}

// R3: a container's caddy.port overrides the route's port; without it the
// route's port applies, even when the container serves elsewhere.
func TestDocker_R3_caddy_port_overrides_the_route_port(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r3-port")
	alt := dockertest.Start(t, cli, dockertest.Options{
		Name: "r3-alt", Env: []string{"PORT=9000"},
		Labels: map[string]string{"app": app, "caddy.port": "9000"},
	})
	std := dockertest.Start(t, cli, dockertest.Options{Name: "r3-std", Labels: map[string]string{"app": app}})
	// Serves on 9000 without saying so: the route's 8080 applies. Its
	// health check (which probes $PORT) says when it serves, so that a
	// 502 then means "sent to the wrong port", not "not up yet".
	app2 := dockertest.Name("r3-nolabel")
	nolabel := dockertest.Start(t, cli, dockertest.Options{
		Name: "r3-nolabel", Env: []string{"PORT=9000"},
		Labels: map[string]string{"app": app2}, Health: dockertest.HealthCheck(100*time.Millisecond, 0),
	})
	labelled, unlabelled := hostName("r3-labelled"), hostName("r3-unlabelled")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy round_robin
		%s
	}
}
http://%s:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, labelled, httpPort, app, upstreamHeader, unlabelled, httpPort, app2))

	want := map[string]string{
		hello("r3-alt"): net.JoinHostPort(containerIP(t, cli, alt, ""), "9000"),
		hello("r3-std"): net.JoinHostPort(containerIP(t, cli, std, ""), "8080"),
	}
	seen := answeredBy(t, tester, labelled, 2)
	for body, upstream := range want {
		if !sameDial(seen[body], upstream) {
			t.Errorf("%q came from %s, want %s", body, seen[body], upstream)
		}
	}
	for range 6 {
		mustGet(t, tester, labelled, http.StatusOK, "")
	}

	waitHealth(t, cli, nolabel, container.Healthy)
	answersWithin(t, tester, unlabelled, http.StatusBadGateway, "", waitFor)
	wrong := net.JoinHostPort(containerIP(t, cli, nolabel, ""), "8080")
	eventually(t, "Caddy's log shows the dial to the route's port "+wrong, func() bool {
		return len(testkit.LogLines(t, logFile, wrong)) > 0
	})
}

// R1 and R11 health: a container with a health check joins only once its
// check says healthy (not while starting or unhealthy), and leaves when it
// turns unhealthy.
func TestDocker_R1_health_gating(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r1-health")
	host := hostName("r1-health")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		%s
	}
}`, httpPort, app, upstreamHeader))
	// Published on loopback only, for the test to drive its health: R4
	// leaves such a port alone, so Caddy goes to the container's address.
	c := dockertest.Start(t, cli, dockertest.Options{
		Name:   "r1-health",
		Labels: map[string]string{"app": app},
		Env:    []string{"HEALTH=bad"},
		Health: dockertest.HealthCheck(200*time.Millisecond, 0),
		Ports:  []string{"127.0.0.1::8080"},
	})
	published := dockertest.PublishedAddr(t, cli, c, "8080/tcp")
	mustGet(t, tester, host, http.StatusServiceUnavailable, "") // starting, or already unhealthy

	waitHealth(t, cli, c, container.Unhealthy)
	for range 10 {
		mustGet(t, tester, host, http.StatusServiceUnavailable, "")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code, _, err := dockertest.Post(ctx, published, "/health/good"); err != nil || code != http.StatusOK {
		t.Fatalf("POST /health/good: %d %v", code, err)
	}
	r, took := answersWithin(t, tester, host, http.StatusOK, hello("r1-health"), waitFor)
	t.Logf("joined %s after /health/good", took.Round(time.Millisecond))
	if want := net.JoinHostPort(containerIP(t, cli, c, ""), "8080"); !sameDial(r.upstream, want) {
		t.Errorf("upstream %s, want the container's own address %s (the port is published on loopback only)", r.upstream, want)
	}

	if code, _, err := dockertest.Post(ctx, published, "/health/bad"); err != nil || code != http.StatusOK {
		t.Fatalf("POST /health/bad: %d %v", code, err)
	}
	_, took = answersWithin(t, tester, host, http.StatusServiceUnavailable, "", waitFor)
	t.Logf("left %s after /health/bad", took.Round(time.Millisecond))
	waitHealth(t, cli, c, container.Unhealthy)
	mustGet(t, tester, host, http.StatusServiceUnavailable, "")

	for _, want := range []string{`"why":"running and healthy"`, `"why":"unhealthy"`} {
		if len(testkit.LogLines(t, logFile, want, `"instance":"`+c.Name+`"`)) == 0 {
			t.Errorf("log lacks %s for %s", want, c.Name)
		}
	}
}

// R6 and R11 events: stop, start, pause, unpause and remove each take the
// site's only container out of or into the rotation without a reload,
// each seen in Caddy's answers within a second of the Engine call.
func TestDocker_R6_lifecycle_events_within_a_second(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r6-life")
	host := hostName("r6-life")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	mustGet(t, tester, host, http.StatusServiceUnavailable, "")

	created := time.Now()
	c := dockertest.Start(t, cli, dockertest.Options{Name: "r6-life", Labels: map[string]string{"app": app}})
	call := time.Since(created)
	_, took := answersWithin(t, tester, host, http.StatusOK, hello("r6-life"), waitFor)
	t.Logf("%-8s Engine calls %s, answered 200 after %s", "create", call.Round(time.Millisecond), took.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	steps := []struct {
		name   string
		change func() error
		status int
	}{
		{"stop", func() error { return cli.ContainerStop(ctx, c.ID, container.StopOptions{}) }, http.StatusServiceUnavailable},
		{"start", func() error { return cli.ContainerStart(ctx, c.ID, container.StartOptions{}) }, http.StatusOK},
		{"pause", func() error { return cli.ContainerPause(ctx, c.ID) }, http.StatusServiceUnavailable},
		{"unpause", func() error { return cli.ContainerUnpause(ctx, c.ID) }, http.StatusOK},
		{"remove", func() error { return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }, http.StatusServiceUnavailable},
	}
	for _, s := range steps {
		body := ""
		if s.status == http.StatusOK {
			body = hello("r6-life")
		}
		called := time.Now()
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		call := time.Since(called)
		_, took := answersWithin(t, tester, host, s.status, body, changeWithin)
		t.Logf("%-8s Engine call %s, answered %d after %s", s.name, call.Round(time.Millisecond), s.status, took.Round(time.Millisecond))
		// The answer holds: the change is not a passing glitch.
		for range 5 {
			mustGet(t, tester, host, s.status, body)
		}
	}

	name := dockertest.Name("r6-life")
	joins := testkit.LogLines(t, logFile, `"instance joins rotation"`, `"instance":"`+name+`"`)
	leaves := testkit.LogLines(t, logFile, `"instance leaves rotation"`, `"instance":"`+name+`"`)
	if len(joins) != 3 || len(leaves) != 3 {
		t.Errorf("log has %d joins and %d leaves of %s, want 3 and 3 (once per change):\n%s",
			len(joins), len(leaves), name, strings.Join(append(joins, leaves...), "\n"))
	}
	if paused := testkit.LogLines(t, logFile, `"instance leaves rotation"`, `"instance":"`+name+`"`, `"why":"paused"`); len(paused) != 1 {
		t.Errorf("log has %d leaves of %s with why paused, want 1:\n%s", len(paused), name, strings.Join(leaves, "\n"))
	}
}

// R7: permission docker allows an on-demand certificate for a host that a
// container claims, running or stopped, and refuses any other.
func TestDocker_R7_permission_allows_only_claimed_hosts(t *testing.T) {
	cli := engine(t)
	shop, old, evil := hostName("r7-shop"), hostName("r7-old"), hostName("r7-evil")
	dockertest.Start(t, cli, dockertest.Options{Name: "r7-shop", Labels: map[string]string{"caddy.host": shop}})
	stopped := dockertest.Start(t, cli, dockertest.Options{Name: "r7-old", Labels: map[string]string{"caddy.host": old}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerStop(ctx, stopped.ID, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	_, logFile := dockerCaddy(t, onDemandDockerGlobal, onDemandDockerSite)

	httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	// HTTPS through the on-demand certificate to the containers.
	client := testkit.HTTPSClient(httpsAddr, nil, waitFor)
	defer client.CloseIdleConnections()
	getTLS := func(name string) (int, string, error) {
		res, err := client.Get("https://" + name + "/")
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err == nil && res.Header.Get(runHeader) != dockertest.RunID() {
			t.Fatalf("https://%s/: %v", name, errForeign)
		}
		return res.StatusCode, string(body), err
	}

	for start, deadline := time.Now(), time.Now().Add(waitFor); ; {
		status, body, err := getTLS(shop)
		if err == nil && status == http.StatusOK && body == hello("r7-shop") {
			t.Logf("first HTTPS answer (certificate issued on demand) after %s", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HTTPS to %s: last answer %d %q %v within %s; want 200 from its container", shop, status, body, err, waitFor)
		}
		time.Sleep(20 * time.Millisecond) // poll the condition
	}
	if err := tlsHandshake(strings.ToUpper(shop)); err != nil {
		t.Errorf("claimed host %s in upper case: handshake failed: %v", strings.ToUpper(shop), err)
	}
	// A stopped container's host gets its certificate; requests then find
	// no routable container, once Caddy's catalog has the stop: the Engine
	// sends its die event before `docker stop` returns, Podman up to a few
	// hundred ms after (its events come from a file it polls), and a
	// connection shared with earlier tests follows those events.
	awaitState(t, dockertest.Name("r7-old"), "stopped")
	if err := tlsHandshake(old); err != nil {
		t.Errorf("host %s of a stopped container: handshake failed: %v", old, err)
	}
	if status, _, err := getTLS(old); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("HTTPS to %s (stopped container): %d %v, want 503", old, status, err)
	}
	for _, name := range []string{evil, "example.com", "r7-shop.example.com"} {
		if err := tlsHandshake(name); err == nil {
			t.Errorf("unclaimed host %s: handshake succeeded", name)
		}
	}
	if lines := testkit.LogLines(t, logFile, evil, "no instance lists"); len(lines) == 0 {
		t.Errorf("Caddy's log does not say why %s was refused", evil)
	}
}

// awaitState waits until Caddy's catalog, as the admin API shows it, has
// the named container in state (as InstanceStatus spells it: "stopped",
// "standby"...) and not routable. Podman delivers its events 50 to 100 ms
// late (docs/podman.md): a test asking for a container it has just
// created or stopped waits for the catalog to know first.
func awaitState(t *testing.T, name, state string) {
	t.Helper()
	eventually(t, "Caddy's catalog has "+name+" "+state, func() bool {
		for _, in := range adminInstances(t) {
			if in.Name == name {
				return !in.Routable && in.State == state
			}
		}
		return false
	})
}

// R11 network rule: a container on two networks is reached on the route's
// network setting; without it, on the network its caddy.network label
// names; with neither it gets no requests, and one warning names it.
func TestDocker_R11_network_rule(t *testing.T) {
	cli := engine(t)
	netA := dockertest.CreateNetwork(t, cli, "r11-a")
	netB := dockertest.CreateNetwork(t, cli, "r11-b")
	appPlain, appLabelled := dockertest.Name("r11-plain"), dockertest.Name("r11-labelled")
	viaSetting, viaLabel, ambiguous := hostName("r11-setting"), hostName("r11-label"), hostName("r11-ambiguous")
	// Caddy first, so that the warning lands in this test's log.
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
http://%[1]s:%[4]d {
	reverse_proxy {
		dynamic docker app=%[5]s 8080 {
			network %[7]s
		}
		%[8]s
	}
}
http://%[2]s:%[4]d {
	reverse_proxy {
		dynamic docker app=%[6]s 8080
		%[8]s
	}
}
http://%[3]s:%[4]d {
	reverse_proxy {
		dynamic docker app=%[5]s 8080
		%[8]s
	}
}`, viaSetting, viaLabel, ambiguous, httpPort, appPlain, appLabelled, netB, upstreamHeader))

	// Both containers are created on netA and joined to netB: netB is
	// neither their first network nor the one they were created on.
	plain := dockertest.Start(t, cli, dockertest.Options{
		Name: "r11-plain", Network: netA, Networks: []string{netB},
		Labels: map[string]string{"app": appPlain},
	})
	labelled := dockertest.Start(t, cli, dockertest.Options{
		Name: "r11-labelled", Network: netA, Networks: []string{netB},
		Labels: map[string]string{"app": appLabelled, "caddy.network": netB},
	})

	r, _ := answersWithin(t, tester, viaSetting, http.StatusOK, hello("r11-plain"), waitFor)
	if want := net.JoinHostPort(containerIP(t, cli, plain, netB), "8080"); !sameDial(r.upstream, want) {
		t.Errorf("route with network %s: upstream %s, want %s", netB, r.upstream, want)
	}
	r, _ = answersWithin(t, tester, viaLabel, http.StatusOK, hello("r11-labelled"), waitFor)
	if want := net.JoinHostPort(containerIP(t, cli, labelled, netB), "8080"); !sameDial(r.upstream, want) {
		t.Errorf("caddy.network=%s: upstream %s, want %s", netB, r.upstream, want)
	}
	// The same container, known to be running (it answers above), gets no
	// requests on a route that does not say which network.
	for range 10 {
		mustGet(t, tester, ambiguous, http.StatusServiceUnavailable, "")
	}

	warned := func(name string) []string {
		return testkit.LogLines(t, logFile, `"level":"warn"`, "several networks", `"instance":"`+name+`"`)
	}
	eventually(t, "a warning names "+plain.Name, func() bool { return len(warned(plain.Name)) > 0 })
	if w := warned(plain.Name); len(w) != 1 {
		t.Errorf("%d warnings name %s, want 1:\n%s", len(w), plain.Name, strings.Join(w, "\n"))
	}
	if w := warned(labelled.Name); len(w) != 0 {
		t.Errorf("a warning names %s, which has a caddy.network label:\n%s", labelled.Name, strings.Join(w, "\n"))
	}
}

// onDemandDockerGlobal and onDemandDockerSite are the global options and the
// site of a Caddy that serves every host Docker containers claim over
// HTTPS, with certificates from its internal issuer on demand (R7), to the
// containers' port 8080.
const (
	onDemandDockerGlobal = `
on_demand_tls {
	permission docker
}`
	onDemandDockerSite = `
https:// {
	tls internal {
		on_demand
	}
	reverse_proxy {
		dynamic docker {
			port 8080
		}
	}
}`
)
