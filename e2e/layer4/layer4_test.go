//go:build e2e && linux

package layer4

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// route is a Caddy with one plain layer-4 route per entry of sels (a
// selector, port), each on a port of its own, plus one route on a TLS
// port, by server name, for the first.
type route struct {
	caddy *caddyProc
	plain []string // 127.0.0.1:port of each route
	tls   string   // 127.0.0.1:port of the TLS route
	extra []string // 127.0.0.1:port of each extra route (startRoutesWith)
}

// caseSelector is the selector of a test's own containers.
func caseSelector(name string) string {
	return "cdl4.case=" + name + "," + dockertest.RunLabel + "=" + dockertest.RunID()
}

func startRoutes(t *testing.T, port int, sels ...string) route {
	t.Helper()
	return startRoutesWith(t, port, nil, sels...)
}

// startRoutesWith is startRoutes plus one route per entry of extra, a
// layer-4 handler line of caddy-l4's (such as `proxy 10.0.0.2:6379`), each
// on a port of its own.
func startRoutesWith(t *testing.T, port int, extra []string, sels ...string) route {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))
	r := route{tls: fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))}
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin %s\n\tlayer4 {\n", admin)
	for _, sel := range sels {
		addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))
		r.plain = append(r.plain, addr)
		fmt.Fprintf(&b, "\t\t%s {\n\t\t\troute {\n\t\t\t\tdicer_proxy docker %s %d {\n\t\t\t\t\twake_timeout 30s\n\t\t\t\t}\n\t\t\t}\n\t\t}\n", addr, sel, port)
	}
	for _, handler := range extra {
		addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))
		r.extra = append(r.extra, addr)
		fmt.Fprintf(&b, "\t\t%s {\n\t\t\troute {\n\t\t\t\t%s\n\t\t\t}\n\t\t}\n", addr, handler)
	}
	fmt.Fprintf(&b, "\t\t%s {\n\t\t\t@tls tls\n\t\t\troute @tls {\n\t\t\t\tdicer_proxy docker %s %d\n\t\t\t}\n\t\t}\n", r.tls, sels[0], port)
	b.WriteString("\t}\n}\n")
	r.caddy = startCaddy(t, admin, b.String())
	// The layer4 app listens once its config runs, after the admin
	// endpoint: wait for each listener (a connect and close wakes nothing,
	// R14a).
	for _, addr := range append(append([]string{r.tls}, r.plain...), r.extra...) {
		testkit.Eventually(t, 30*time.Second, "Caddy's layer4 listener "+addr+" accepts", func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	return r
}

// hello sends one HTTP request over a new connection to addr and returns
// the name of the container that answered ("hello from <name>").
func hello(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: l4.test\r\n\r\n"); err != nil {
		return "", err
	}
	body, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	_, after, ok := strings.Cut(string(body), "hello from ")
	if !ok {
		return "", fmt.Errorf("no hello in %q", body)
	}
	return strings.TrimSpace(after), nil
}

func TestL4_R14_connections_rotate_over_the_routable_instances(t *testing.T) {
	// The hello server answers with its Options.Name.
	dockertest.Start(t, cli, dockertest.Options{Name: "l4rot-a", Labels: map[string]string{"cdl4.case": "rot"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "l4rot-b", Labels: map[string]string{"cdl4.case": "rot"}})
	r := startRoutes(t, 8080, caseSelector("rot"))
	seen := map[string]int{}
	testkit.Eventually(t, 30*time.Second, "both containers answer through the layer-4 route", func() bool {
		name, err := hello(r.plain[0])
		if err == nil {
			seen[name]++
		}
		return seen["l4rot-a"] > 0 && seen["l4rot-b"] > 0
	})
	failed := 0
	for range 100 {
		name, err := hello(r.plain[0])
		if err != nil {
			failed++
			t.Logf("connection: %v", err)
			continue
		}
		seen[name]++
	}
	if failed > 0 {
		t.Errorf("%d of 100 connections failed", failed)
	}
	if d := seen["l4rot-a"] - seen["l4rot-b"]; d > 20 || d < -20 {
		t.Errorf("connections not in rotation: %v", seen)
	}
	t.Logf("answers by container: %v", seen)
}

// standbyContainer starts a container labelled caddy.standby_after, waits
// until it answers directly, measuring its own start (docker start to its
// first answer), then stops it: on standby.
func standbyContainer(t *testing.T, name, caseName, after string, labels map[string]string) (dockertest.Container, time.Duration) {
	t.Helper()
	l := map[string]string{"cdl4.case": caseName, "caddy.standby_after": after}
	for k, v := range labels {
		l[k] = v
	}
	c := dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: l, NoStart: true})
	start := time.Now()
	if out, err := dockertest.Docker(time.Minute, "start", c.ID); err != nil {
		t.Fatalf("docker start: %v\n%s", err, out)
	}
	ip := testkit.ContainerIP(t, cli, c.ID, "bridge")
	testkit.Eventually(t, 30*time.Second, "the container answers directly", func() bool {
		_, err := hello(net.JoinHostPort(ip, "8080"))
		return err == nil
	})
	own := time.Since(start)
	if out, err := dockertest.Docker(time.Minute, "stop", "-t", "1", c.ID); err != nil {
		t.Fatalf("docker stop: %v\n%s", err, out)
	}
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 30*time.Second)
	return c, own
}

func TestL4_R14a_first_connection_wakes_a_stopped_container(t *testing.T) {
	const short = "l4wake" // the hello server answers with it
	c, own := standbyContainer(t, short, "wake", "1h", nil)
	r := startRoutes(t, 8080, caseSelector("wake"))
	ev := testkit.WatchContainer(t, cli, c.ID)
	start := time.Now()
	name, err := hello(r.plain[0])
	if err != nil {
		t.Fatalf("the first connection to a stopped container: %v (it must be held, not reset)", err)
	}
	took := time.Since(start)
	if name != short {
		t.Fatalf("answered by %q, want %q", name, short)
	}
	if n := ev.Count(events.ActionStart); n != 1 {
		t.Errorf("%d start events, want 1", n)
	}
	t.Logf("connect to first byte %s; the container's own start to its first answer %s; overhead %s",
		took.Round(time.Millisecond), own.Round(time.Millisecond), (took - own).Round(time.Millisecond))
	if took > own+5*time.Second {
		t.Errorf("connect to first byte %s, far beyond the container's own start %s", took, own)
	}
}

func TestL4_R14a_probes_and_unclaimed_server_names_wake_nothing(t *testing.T) {
	c, _ := standbyContainer(t, "l4probe", "probe", "1h", map[string]string{"caddy.host": "claimed.l4.test"})
	r := startRoutes(t, 8080, caseSelector("probe"))
	ev := testkit.WatchContainer(t, cli, c.ID)
	for range 100 { // a port scan: connect, close
		conn, err := net.DialTimeout("tcp", r.plain[0], 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	for i := range 100 { // TLS hellos for names nobody claims: each connection is closed
		sni := "x" + strconv.Itoa(i) + ".unclaimed.l4.test"
		conn, err := net.DialTimeout("tcp", r.tls, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // no certificate is served
		_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatalf("handshake for %s succeeded", sni)
		}
		tc.Close()
	}
	// The port scan's connections: the last of them was accepted before
	// the first hello's, so each was handled; none may have woken it.
	if n := ev.Count(events.ActionStart); n != 0 {
		t.Fatalf("probes woke the container: %d start events", n)
	}
	if st := testkit.ContainerState(t, cli, c.ID); st != "exited" {
		t.Fatalf("container %s after the probes, want exited", st)
	}
	// The control: a hello for the claimed name wakes it.
	conn, err := net.DialTimeout("tcp", r.tls, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "claimed.l4.test", InsecureSkipVerify: true}) //nolint:gosec // the hello server speaks no TLS
	_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
	_ = tc.Handshake() // the container answers TLS with HTTP: the handshake fails, after the wake
	tc.Close()
	testkit.Eventually(t, 30*time.Second, "the claimed name wakes the container", func() bool {
		return ev.Count(events.ActionStart) == 1
	})
}

func TestL4_R14b_an_open_connection_keeps_its_instance_up(t *testing.T) {
	const after = 2 * time.Second
	c := dockertest.Start(t, cli, dockertest.Options{Name: "l4keep",
		Labels: map[string]string{"cdl4.case": "keep", "caddy.standby_after": after.String()}})
	r := startRoutes(t, 8080, caseSelector("keep"))
	ev := testkit.WatchContainer(t, cli, c.ID)
	var conn net.Conn
	testkit.Eventually(t, 30*time.Second, "a keep-alive request answered through the route", func() bool {
		var err error
		if conn, err = net.DialTimeout("tcp", r.plain[0], 5*time.Second); err != nil {
			return false
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: l4.test\r\n\r\n"); err != nil {
			conn.Close()
			return false
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			conn.Close()
			return false
		}
		return true
	})
	opened := time.Now()
	// Quiet but open for three times standby_after: the container stays.
	if testkit.Until(3*after, func() bool { return ev.Count(events.ActionStop)+ev.Count(events.ActionDie) > 0 }) {
		t.Fatalf("the container was stopped %s after its connection opened, while it was open", time.Since(opened).Round(time.Millisecond))
	}
	conn.Close()
	closed := time.Now()
	testkit.Eventually(t, after+10*time.Second, "the container goes on standby once its connection closed", func() bool {
		return testkit.ContainerState(t, cli, c.ID) == "exited"
	})
	t.Logf("on standby %s after the close (standby_after %s)", time.Since(closed).Round(time.Millisecond), after)
}

func TestL4_R14_redis_benchmark_through_caddy_vs_direct(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Fatalf("redis-benchmark is not installed (apt-get install redis-tools): %v", err)
	}
	c := dockertest.Start(t, cli, dockertest.Options{Name: "l4redis", Image: redisImage,
		Labels: map[string]string{"cdl4.case": "redis"}})
	ip := testkit.ContainerIP(t, cli, c.ID, "bridge")
	direct := net.JoinHostPort(ip, "6379")
	// The baselines: caddy-l4's own static proxy in the same Caddy, and
	// haproxy in TCP mode, both to the same container address.
	r := startRoutesWith(t, 6379, []string{"proxy " + direct}, caseSelector("redis"))
	caddyPID := r.caddy.cmd.Process.Pid
	paths := []benchPath{
		{name: "direct", addr: direct},
		{name: "dicer_proxy", addr: r.plain[0], pid: caddyPID},
		{name: "caddy-l4 proxy", addr: r.extra[0], pid: caddyPID},
	}
	haproxy, haproxyPID, haveHaproxy := startHaproxy(t, direct)
	if haveHaproxy {
		paths = append(paths, benchPath{name: "haproxy", addr: haproxy, pid: haproxyPID})
	}
	for _, p := range paths {
		testkit.Eventually(t, 30*time.Second, "Redis answers PING by "+p.name, func() bool {
			out, err := exec.Command("redis-cli", "-h", host(p.addr), "-p", port(p.addr), "PING").CombinedOutput()
			return err == nil && strings.TrimSpace(string(out)) == "PONG"
		})
	}
	// Without pipelining each client waits for each answer (latency-bound);
	// with -P 16 the connections stay full (throughput-bound). Each round
	// runs every path, in an order that turns each round, so that a busy
	// moment of the machine hits all of them alike. The proxy's CPU time
	// per request is the steadier figure on a loaded machine.
	const rounds = 3
	for _, bc := range []struct {
		pipeline string
		requests int
	}{{"1", 20000}, {"16", 100000}} {
		rps := make([]float64, len(paths))
		ticks := make([]int64, len(paths))
		for round := range rounds {
			for k := range paths {
				i := (round + k) % len(paths)
				before := cpuTicks(t, paths[i].pid)
				rps[i] += redisBenchmark(t, paths[i].addr, bc.pipeline, strconv.Itoa(bc.requests)) / rounds
				ticks[i] += cpuTicks(t, paths[i].pid) - before
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "redis-benchmark set+get -n %d -c 10 -P %s, %d rounds, mean req/s (proxy CPU µs per request):", bc.requests, bc.pipeline, rounds)
		for i, p := range paths {
			fmt.Fprintf(&b, " %s %.0f", p.name, rps[i])
			if p.pid != 0 { // USER_HZ: 100 ticks a second
				fmt.Fprintf(&b, " (%.1f)", float64(ticks[i])*1e4/float64(2*rounds*bc.requests))
			}
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " ratios: dicer_proxy/direct %.2f (goal >= 0.9), caddy-l4 proxy/direct %.2f, dicer_proxy/caddy-l4 proxy %.2f",
			rps[1]/rps[0], rps[2]/rps[0], rps[1]/rps[2])
		if haveHaproxy {
			fmt.Fprintf(&b, ", haproxy/direct %.2f, dicer_proxy/haproxy %.2f", rps[3]/rps[0], rps[1]/rps[3])
		}
		t.Log(b.String())
	}
	if !haveHaproxy {
		t.Skip("haproxy is not installed (apt-get install haproxy): the ratios above lack its baseline")
	}
}

// benchPath is a way to the Redis container: directly or through a proxy.
type benchPath struct {
	name string
	addr string // host:port
	pid  int    // the proxy's process; 0: none
}

// cpuTicks returns the CPU time process pid has used so far, user and
// system, in clock ticks (/proc/<pid>/stat); 0 for pid 0.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// After "pid (comm) ": state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return utime + stime
}

// redisBenchmark runs redis-benchmark's SET and GET against addr and
// returns their requests per second, added.
func redisBenchmark(t *testing.T, addr, pipeline, requests string) float64 {
	t.Helper()
	out, err := exec.Command("redis-benchmark", "-h", host(addr), "-p", port(addr), "-t", "set,get",
		"-n", requests, "-c", "10", "-P", pipeline, "-q", "--csv").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	return sumRPS(t, string(out))
}

// startHaproxy runs haproxy in TCP mode with its defaults, on a loopback
// port, to upstream, until the test ends, and returns its address and
// process; false when haproxy is not installed.
func startHaproxy(t *testing.T, upstream string) (string, int, bool) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Logf("haproxy is not installed (apt-get install haproxy): no haproxy baseline")
		return "", 0, false
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	conf := fmt.Sprintf(`global
	maxconn 1000
defaults
	mode tcp
	timeout connect 10s
	timeout client 1m
	timeout server 1m
frontend redis
	bind %s
	default_backend redis
backend redis
	server redis %s
`, addr, upstream)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "-db", "-f", cfg) // -db: in the foreground
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting haproxy: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	testkit.Eventually(t, 30*time.Second, "haproxy listens on "+addr, func() bool {
		select {
		case <-done:
			t.Fatalf("haproxy exited: %s", log.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, cmd.Process.Pid, true
}

func host(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// sumRPS adds the requests per second of redis-benchmark's CSV lines.
func sumRPS(t *testing.T, out string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 2 || strings.HasPrefix(f[0], `"test"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Trim(f[1], `"`), 64)
		if err != nil {
			continue
		}
		sum += v
	}
	if sum == 0 {
		t.Fatalf("no figure in redis-benchmark's output:\n%s", out)
	}
	return sum
}
