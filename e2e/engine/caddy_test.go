package engine

// In-process Caddy tests (caddytest): a real Caddy serves real HTTP requests
// through the dicer modules to instances of the repo's test daemon
// (internal/dicertest, which serves Dicer's wire API; it is not Dicer).
// Instances are small HTTP servers on 127.0.0.0/8 addresses.

import (
	"context"
	"flag"
	"fmt"
	"go/build"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	_ "github.com/caddy-dicer/caddy-dicer" // the modules under test
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

func TestMain(m *testing.M) {
	if code, ok := instanceProcess(); ok { // a dicertest.Host's instance (dicer_pool_test.go)
		os.Exit(code)
	}
	code := runTests(m)
	runtime.KeepAlive(portsLock) // released by the exit, with Caddy's ports
	os.Exit(code)
}

// portsLock is this process's turn on the fixed ports (runTests), held
// until it exits.
var portsLock *os.File

// runTests sets up what the in-process Caddy needs, runs the tests and
// returns their exit code.
func runTests(m *testing.M) int {
	flag.Parse()
	// Every container the in-process Caddy must see is made by dockertest
	// (the real apps', the foreign label sets' and the sleepers' too): it
	// follows this run's only (R2g), not those of a test process beside it.
	dockertest.FollowRun()
	// caddytest sends every config to whatever Caddy answers on its fixed
	// admin port, even one in another test process, and Caddy's listeners
	// share ports: test processes of this package take turns. Under -short
	// no test starts Caddy, and neither does a fuzzing run (go test -fuzz),
	// whose worker is a child process that would wait forever for its
	// parent's lock: neither takes it.
	if !testing.Short() && !fuzzing() {
		lock, err := os.OpenFile(filepath.Join(os.TempDir(), "caddy-dicer-caddytest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			panic(err)
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			panic(err)
		}
		// Held until the process exits, not closed when the tests end:
		// the in-process Caddy keeps the admin and site ports until then,
		// and the next process that takes the lock sent its first configs
		// to this one's Caddy (a clean-clone run: Podman's e2e/engine
		// right after the real apps').
		portsLock = lock
	}
	// The go command (the Docker tests build an image from our own server)
	// keeps its caches where HOME says; pin them before HOME moves.
	if os.Getenv("GOCACHE") == "" {
		if cache, err := os.UserCacheDir(); err == nil {
			os.Setenv("GOCACHE", filepath.Join(cache, "go-build"))
		}
	}
	if os.Getenv("GOPATH") == "" {
		os.Setenv("GOPATH", build.Default.GOPATH)
	}
	// caddytest keeps Caddy's storage and autosave under these; keep them
	// out of the developer's home.
	dir, err := os.MkdirTemp("", "caddy-dicer-test")
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"} {
		os.Setenv(v, dir)
	}
	code := m.Run()
	os.RemoveAll(dir)
	return code
}

// The in-process Caddy listens on fixed ports: caddytest's admin port
// (caddytest.Default.AdminPort) and the sites' HTTP and HTTPS ports.
const (
	adminPort = 2999
	httpPort  = 9080
	httpsPort = 9443
	waitFor   = 5 * time.Second
)

// caddyOnFixedPorts is what a test that starts Caddy needs.
var caddyOnFixedPorts = fmt.Sprintf("Caddy in this process on the fixed ports %d (admin), %d and %d", adminPort, httpPort, httpsPort)

// needsCaddy skips t under -short, which runs only the hermetic tests: t
// starts Caddy. Without -short, t fails rather than pass as skipped when
// caddytest skips it for want of a Caddy.
func needsCaddy(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs " + caddyOnFixedPorts + ": run without -short (make test)")
	}
	t.Cleanup(func() {
		if t.Skipped() {
			t.Error("caddytest skipped the test: Caddy could not be started in this process, and these tests require it")
		}
	})
}

// caddyConfig is a Caddyfile with the caddytest globals, a log file (never
// rolled: a test under load writes more than the 100 MiB at which Caddy
// would move its start aside), and the given global options and sites.
// The events app's logger is left out of the debug log: at debug level
// Caddy's events app builds every event, and building the tls app's
// certificate events reads the tls app (a copy of it, CaddyModule has a
// value receiver) while its Start still writes it: a data race inside
// Caddy v2.11.9 (caddytls tls.go:424 against caddyevents app.go:240)
// that -race reported on a loaded CI run.
func caddyConfig(t *testing.T, globals, sites string) (config, logFile string) {
	logFile = filepath.Join(t.TempDir(), "caddy.log")
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
	skip_install_trust
	log {
		output file %s {
			roll_disabled
		}
		level DEBUG
		exclude events
	}
	%s
}
%s
`, adminPort, httpPort, httpsPort, logFile, globals, sites), logFile
}

// startCaddy loads the config of globals and sites (caddyConfig) into the
// in-process Caddy, and returns the tester and Caddy's log file.
func startCaddy(t *testing.T, globals, sites string) (*caddytest.Tester, string) {
	t.Helper()
	config, logFile := caddyConfig(t, globals, sites)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	return tester, logFile
}

// get sends a request for host and returns its status and body.
func get(t *testing.T, tester *caddytest.Tester, host string) (int, string) {
	t.Helper()
	r := caddyAt(tester).Get(context.Background(), host, "/")
	if r.Err != nil {
		t.Fatalf("GET %s: %v", host, r.Err)
	}
	return r.Status, r.Body
}

// caddyAt sends requests to the in-process Caddy's HTTP port with
// tester's client.
func caddyAt(tester *caddytest.Tester) testkit.Caddy {
	return testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: tester.Client}
}

// eventually waits until cond holds, failing t after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// answers waits until a request for host gets status (and, if body is not
// empty, that body).
func answers(t *testing.T, tester *caddytest.Tester, host string, status int, body string) {
	t.Helper()
	answersBy(t, tester, host, status, body, waitFor)
}

// answersBy is answers with its own deadline.
func answersBy(t *testing.T, tester *caddytest.Tester, host string, status int, body string, within time.Duration) {
	t.Helper()
	var gotStatus int
	var gotBody string
	if !testkit.Until(within, func() bool {
		gotStatus, gotBody = get(t, tester, host)
		return gotStatus == status && (body == "" || gotBody == body)
	}) {
		t.Fatalf("host %s: got %d %q within %s, want %d %q", host, gotStatus, gotBody, within, status, body)
	}
}

func hello(name string) string { return "hello from " + name + "\n" }

// repetition numbers the names fresh gives.
var repetition atomic.Int64

// fresh is name with a number no earlier call in this process gave: a
// test run again in the same process (go test -count=N) loads its config
// into the same in-process Caddy, whose certificate cache, storage and
// metrics keep what the earlier run left under a name. A test that
// asserts what happens the first time Caddy sees a name (a certificate
// obtained, a permission asked) names it with fresh.
func fresh(name string) string {
	base, tld, _ := strings.Cut(name, ".")
	n := strconv.FormatInt(repetition.Add(1), 10)
	if tld == "" {
		return base + "-" + n
	}
	return base + "-" + n + "." + tld
}

// webSite is a site on httpPort that routes to the instances labelled
// app=web of the daemon on the unix socket sock.
func webSite(sock string) string {
	return fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%s
		}
	}
}`, httpPort, sock)
}

func TestCaddy_R2_selector_route_shares_requests_evenly(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	for i, name := range []string{"web-1", "web-2", "web-3"} {
		d.HelloInstance(t, name, "127.0.0."+strconv.Itoa(21+i), map[string]string{"app": "web"})
	}
	d.HelloInstance(t, "api-1", "127.0.0.24", map[string]string{"app": "api"})
	tester, _ := startCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%s
		}
		lb_policy round_robin
	}
}`, httpPort, sock))

	counts := map[string]int{}
	for range 30 {
		status, body := get(t, tester, "any.example")
		if status != http.StatusOK {
			t.Fatalf("status %d %q", status, body)
		}
		counts[body]++
	}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		if counts[hello(name)] != 10 {
			t.Errorf("%s got %d of 30 requests, want 10 (all: %v)", name, counts[hello(name)], counts)
		}
	}
}

// tlsHandshake completes a TLS handshake with Caddy's HTTPS port for the
// server name name (R7): nil if Caddy had, or got, a certificate for it.
func tlsHandshake(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := testkit.Handshake(ctx, fmt.Sprintf("127.0.0.1:%d", httpsPort), name, nil)
	return err
}

// hostSite is a site on httpPort that routes by the caddy.host label to
// the instances of the daemon on the unix socket sock.
func hostSite(sock string) string {
	return fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, httpPort, sock)
}

func TestCaddy_R2_host_route(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "shop", "127.0.0.31", map[string]string{"caddy.host": "shop.example.com, www.shop.example.com"})
	d.HelloInstance(t, "blog", "127.0.0.32", map[string]string{"caddy.host": "blog.example.com"})
	tester, _ := startCaddy(t, "", hostSite(sock))

	for host, want := range map[string]string{
		"shop.example.com":      hello("shop"),
		"WWW.Shop.Example.COM":  hello("shop"),
		"shop.example.com:9080": hello("shop"),
		"blog.example.com":      hello("blog"),
	} {
		if status, body := get(t, tester, host); status != http.StatusOK || body != want {
			t.Errorf("host %s: got %d %q, want 200 %q", host, status, body, want)
		}
	}
	if status, _ := get(t, tester, "unclaimed.example.com"); status != http.StatusServiceUnavailable {
		t.Errorf("unclaimed host: got %d, want 503", status)
	}
	// R2b: a trailing dot is not ignored in a request host, as Caddy's
	// sites do not ignore it.
	if status, _ := get(t, tester, "shop.example.com.:9080"); status != http.StatusServiceUnavailable {
		t.Errorf("shop.example.com.:9080: got %d, want 503 (R2b)", status)
	}
}

func TestCaddy_R6_follows_instance_changes_without_reload(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.41", map[string]string{"app": "web"})
	tester, logFile := startCaddy(t, "", webSite(sock))
	answers(t, tester, "x", http.StatusOK, hello("web-1"))

	steps := []struct {
		name   string
		change func()
		status int
		body   string
	}{
		{"paused", func() { d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil) }, 503, ""},
		{"resumed", func() { d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil) }, 200, hello("web-1")},
		{"stopped", func() { d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil) }, 503, ""},
		{"started", func() { d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil) }, 200, hello("web-1")},
		{"unhealthy", func() {
			d.UpdateInstance("web-1", func(i *dicerpb.Instance) {
				i.HealthCheck = &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Tcp{Tcp: &dicerpb.HealthCheckTCP{Port: 1}}}
				i.Health = &dicerpb.Health{Status: dicerpb.HealthStatus_HEALTH_STATUS_STARTING}
			})
			d.SetHealth("web-1", dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY)
		}, 503, ""},
		{"healthy", func() { d.SetHealth("web-1", dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY) }, 200, hello("web-1")},
		{"deleted", func() { d.DeleteInstance("web-1") }, 503, ""},
		{"created", func() { d.HelloInstance(t, "web-2", "127.0.0.42", map[string]string{"app": "web"}) }, 200, hello("web-2")},
	}
	for _, s := range steps {
		s.change()
		answers(t, tester, "x", s.status, s.body)
	}
	for _, want := range []string{`"instance joins rotation"`, `"why":"paused"`, `"why":"unhealthy"`, `"why":"deleted"`} {
		if len(testkit.LogLines(t, logFile, want, `"instance":"web-1"`)) == 0 {
			t.Errorf("log lacks %s for web-1", want)
		}
	}
	if n := d.Calls("ListInstances"); n != 1 {
		t.Errorf("ListInstances called %d times; want 1 (events, not re-lists)", n)
	}
}

func TestCaddy_R6_daemon_gone_keeps_routes(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.51", map[string]string{"app": "web"})
	tester, _ := startCaddy(t, "", webSite(sock))
	answers(t, tester, "x", http.StatusOK, hello("web-1"))

	d.Stop()
	eventually(t, "the follower sees the daemon gone", func() bool { return d.Followers() == 0 })
	for range 20 {
		if status, body := get(t, tester, "x"); status != http.StatusOK || body != hello("web-1") {
			t.Fatalf("daemon down: got %d %q, want the last known instance", status, body)
		}
	}
	// Changes while the daemon is away are picked up by the re-list.
	d.EmitQuietly(true)
	d.DeleteInstance("web-1")
	d.HelloInstance(t, "web-2", "127.0.0.52", map[string]string{"app": "web"})
	d.EmitQuietly(false)
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	answers(t, tester, "x", http.StatusOK, hello("web-2"))
}

func TestCaddy_R9_daemon_down_at_start_fills_in_routes(t *testing.T) {
	needsCaddy(t)
	dir, err := os.MkdirTemp("", "dcr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "d.sock")
	config, _ := caddyConfig(t, "", webSite(sock))
	tester := caddytest.NewTester(t)
	start := time.Now()
	tester.InitServer(config, "caddyfile")
	t.Logf("config with an unreachable daemon loaded in %s", time.Since(start).Round(time.Millisecond))
	if status, _ := get(t, tester, "x"); status != http.StatusServiceUnavailable {
		t.Fatalf("daemon down: got %d, want 503", status)
	}

	d := dicertest.New()
	defer d.Close()
	d.HelloInstance(t, "web-1", "127.0.0.61", map[string]string{"app": "web"})
	if err := d.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}
	// The adapter retries with a backoff capped at 15 s (plus jitter).
	answersBy(t, tester, "x", http.StatusOK, hello("web-1"), 20*time.Second)
}

func TestCaddy_R9_tcp_with_token_and_pinned_certificate(t *testing.T) {
	needsCaddy(t)
	d := dicertest.New()
	defer d.Close()
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.HelloInstance(t, "web-1", "127.0.0.71", map[string]string{"app": "web"})
	token := d.AddToken("caddy", "instances:read", "events:read", "networks:read")
	t.Setenv("TEST_DICER_TOKEN", token)
	tester, _ := startCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address %s
			token {env.TEST_DICER_TOKEN}
		}
	}
}`, httpPort, addr))
	answers(t, tester, "x", http.StatusOK, hello("web-1"))
}

func TestCaddy_R12_wrong_fingerprint_refused_and_logged(t *testing.T) {
	needsCaddy(t)
	d := dicertest.New()
	defer d.Close()
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.HelloInstance(t, "web-1", "127.0.0.81", map[string]string{"app": "web"})
	token := d.AddToken("caddy")
	wrong := token[:len(token)-64] + strings.Repeat("ab", 32)
	tester, logFile := startCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address %s
			token %s
		}
	}
}`, httpPort, addr, wrong))
	if status, _ := get(t, tester, "x"); status != http.StatusServiceUnavailable {
		t.Fatalf("wrong fingerprint: got %d, want 503 (no routes)", status)
	}
	eventually(t, "the log names the fingerprint mismatch", func() bool {
		return strings.Contains(testkit.ReadFile(t, logFile), "does not match the token")
	})
	if n := d.Calls("ListInstances"); n != 0 {
		t.Errorf("ListInstances reached the daemon %d times through an unpinned connection", n)
	}
	if strings.Contains(testkit.ReadFile(t, logFile), token[6:58]) {
		t.Error("the log holds the token's secret")
	}
}

func TestCaddy_R9_shared_connection_survives_reload(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.91", map[string]string{"app": "web", "caddy.host": "web.example.com"})
	site := func(body string) (string, string) {
		return fmt.Sprintf(`
on_demand_tls {
	permission dicer {
		address unix:%s
	}
}`, sock), fmt.Sprintf(`
:%d {
	header X-Config %s
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%s
		}
	}
}`, httpPort, body, sock)
	}
	tester := caddytest.NewTester(t)
	globals, sites := site("one")
	config, _ := caddyConfig(t, globals, sites)
	tester.InitServer(config, "caddyfile")
	answers(t, tester, "web.example.com", http.StatusOK, hello("web-1"))
	first := openConnection("dicer", "unix:"+sock)
	if refs := dicerapp.Holders(first); refs != 2 {
		t.Fatalf("references after load: %d, want 2 (upstreams + permission)", refs)
	}

	globals, sites = site("two")
	config, _ = caddyConfig(t, globals, sites)
	tester.InitServer(config, "caddyfile")
	second := openConnection("dicer", "unix:"+sock)
	if refs := dicerapp.Holders(second); refs != 2 {
		t.Fatalf("references after reload: %d, want 2", refs)
	}
	if first != second {
		t.Error("reload replaced the shared connection")
	}
	if n := d.Calls("ListInstances"); n != 1 {
		t.Errorf("ListInstances called %d times; the reload reconnected", n)
	}
	answers(t, tester, "web.example.com", http.StatusOK, hello("web-1"))
}

func TestCaddy_R7_on_demand_tls_only_for_claimed_hosts(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "shop", "127.0.0.101", map[string]string{"caddy.host": "shop.example.com"})
	stopped := d.HelloInstance(t, "old", "127.0.0.102", map[string]string{"caddy.host": "old.example.com"})
	d.SetState(stopped.GetName(), dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	startCaddy(t, fmt.Sprintf(`
on_demand_tls {
	permission dicer {
		address unix:%s
	}
}`, sock), fmt.Sprintf(`
https:// {
	tls internal {
		on_demand
	}
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, sock))

	for _, name := range []string{"shop.example.com", "SHOP.example.com", "old.example.com"} {
		if err := tlsHandshake(name); err != nil {
			t.Errorf("claimed host %s: handshake failed: %v", name, err)
		}
	}
	for _, name := range []string{"evil.example.com", "example.com"} {
		if err := tlsHandshake(name); err == nil {
			t.Errorf("unclaimed host %s: handshake succeeded", name)
		}
	}
}

// openConnection is the open connection of the daemon of kind at address
// (as the admin API names it), nil if there is none.
func openConnection(kind, address string) *connection.Conn {
	for _, c := range dicerapp.Connections() {
		if c.Kind() == kind && (address == "" || c.Address() == address) {
			return c
		}
	}
	return nil
}

// fuzzing reports whether the test binary runs as go test -fuzz's
// coordinator or worker, which run only a fuzz target.
func fuzzing() bool {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzz") {
			return true
		}
	}
	return false
}
