package engine

// Pools that grow under load on Dicer (R5j), through a real Caddy, against
// the repo's test daemon with a dicertest.Host (it is not Dicer): each
// instance is a process of this test binary serving slow hello answers,
// its published port relayed by the Host, which wakes an instance on
// standby when a connection arrives there, as Dicer does.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// The environment of an instance process: its name and the address it
// serves on.
const (
	instanceNameEnv = "CADDY_DICER_TEST_INSTANCE_NAME"
	instanceAddrEnv = "CADDY_DICER_TEST_INSTANCE_ADDR"
)

// maxSlow bounds the d of a request for /slow?d=<duration>.
const maxSlow = 2 * time.Second

// instanceProcess serves as an instance of a dicertest.Host when this
// test binary was started as one (see instanceCommand), and reports its
// exit code; ok is false in a normal run.
func instanceProcess() (code int, ok bool) {
	name, addr := os.Getenv(instanceNameEnv), os.Getenv(instanceAddrEnv)
	if name == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serveSlowHello(ctx, addr, name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3, true
	}
	return 0, true
}

// serveSlowHello answers every request on addr with hello(name), a
// request for /slow?d=<duration> after that long (at most maxSlow), until
// ctx ends.
func serveSlowHello(ctx context.Context, addr, name string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/sha256" {
				serveSHA256(w, r) // R5p (docker_lifecycle_test.go)
				return
			}
			if d, err := time.ParseDuration(r.URL.Query().Get("d")); err == nil && r.URL.Path == "/slow" {
				select {
				case <-time.After(min(d, maxSlow)):
				case <-r.Context().Done():
				}
			}
			_, _ = fmt.Fprint(w, hello(name))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// instanceCommand is a dicertest.Host's Command: this test binary as an
// instance process (os.Executable: Caddy rewrites os.Args).
func instanceCommand(name, addr string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), instanceNameEnv+"="+name, instanceAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	return cmd
}

// testHost is a dicertest.Host on the test daemon at the returned unix
// socket, its network 127.0.0.0/8 with the gateway on 127.0.0.1, where
// published ports are listened on; closed at the end of t.
func testHost(t *testing.T, wakeDelay time.Duration) (*dicertest.Host, string) {
	t.Helper()
	d, sock := dicertest.OnSocket(t)
	h, err := dicertest.NewHost(d, dicertest.HostConfig{Subnet: "127.0.0.0/8", Gateway: "127.0.0.1",
		Command: instanceCommand, WakeDelay: wakeDelay, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, sock
}

// wokenByConnect is the published ports whose connections woke the
// instance name from standby, as the Host's events record them.
func wokenByConnect(h *dicertest.Host, name string) []string {
	var ports []string
	for _, ev := range h.Daemon().Events() {
		if p := ev.GetAttributes()["woken_by_port"]; ev.GetName() == name && p != "" {
			ports = append(ports, p)
		}
	}
	return ports
}

// R5j on Dicer: a pool of three instances labelled caddy.soft_limit=3, one
// running and two on standby with a published port (standby_after set).
// Two clients of slow requests (at most 3 in flight) wake none; six (5 in
// flight when a request comes) make Caddy connect to the published port
// of pool-b, the first on standby by name, which the Host wakes (woken by
// that connection) and which then serves, with no failed request.
func TestCaddy_R5j_dicer_pool_grows_under_load(t *testing.T) {
	needsCaddy(t)
	h, sock := testHost(t, 200*time.Millisecond)
	host := "pool.test"
	names := []string{"pool-a", "pool-b", "pool-c"}
	for i, name := range names {
		ip := "127.0.0." + strconv.Itoa(161+i)
		port := testkit.FreePort(t, ip)
		if _, err := h.Run(dicertest.InstanceSpec{Name: name, IP: ip, Port: port, StandbyAfter: time.Minute,
			Labels:  map[string]string{"caddy.host": host, "caddy.soft_limit": "3"},
			Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port), Protocol: dicerpb.Protocol_PROTOCOL_TCP}}}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := h.Standby(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	tester, logFile := startCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, host, httpPort, sock))
	answers(t, tester, host, http.StatusOK, hello("pool-a"))

	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: loadClient()}
	get := func() testkit.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return caddy.Get(ctx, host, "/slow?d=150ms")
	}
	served := func(r testkit.Result) bool {
		return r.Err == nil && r.Status == http.StatusOK && strings.HasPrefix(r.Body, "hello from pool-")
	}

	// Under the threshold: 2 clients, 10 requests each.
	for _, rs := range testkit.Burst(2, func() []testkit.Result {
		var rs []testkit.Result
		for range 10 {
			rs = append(rs, get())
		}
		return rs
	}) {
		for _, r := range rs {
			if !r.Is(http.StatusOK, hello("pool-a")) {
				t.Fatalf("under the soft limit: %s, want pool-a's answer", r)
			}
		}
	}
	for _, name := range names[1:] {
		if ports := wokenByConnect(h, name); len(ports) != 0 || h.State(name) != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
			t.Fatalf("2 clients under a soft limit of 3: %s is %v, woken by connections to %v", name, h.State(name), ports)
		}
	}

	// Over it: 6 clients until pool-b serves.
	step := time.Now()
	load := testkit.StartLoad(6, get, served)
	defer load.Stop() // also when the test fails
	grown := testkit.Until(20*time.Second, func() bool { return load.Served(hello("pool-b")) > 0 })
	took := time.Since(step)
	load.Stop()
	if !grown {
		t.Fatalf("pool-b served nothing within 20 s of 6 clients; woken by connections to %v; served %v",
			wokenByConnect(h, "pool-b"), load.Bodies())
	}
	if failed, first := load.Failed(); failed != 0 {
		t.Errorf("%d of %d requests failed, e.g. %v", failed, load.Total(), first)
	}
	t.Logf("step to 6 clients -> pool-b has served a request: %s (a wake delay of 200 ms and 150 ms requests); served %v",
		took.Round(time.Millisecond), load.Bodies())
	if ports := wokenByConnect(h, "pool-b"); len(ports) != 1 {
		t.Errorf("pool-b woken by connections to %v, want one wake by a connection to its published port", ports)
	}
	if lines := testkit.LogLines(t, logFile, "past its caddy.soft_limit", `"instance":"pool-b"`); len(lines) == 0 {
		t.Error("no log line of the growth naming pool-b")
	}
	for _, line := range testkit.LogLines(t, logFile, "past its caddy.soft_limit") {
		t.Log(line) // pool-c may follow once pool-b is ready: a request learning a counter counts as one until it ends
	}
	for _, line := range testkit.LogLines(t, logFile, "woken instance accepts connections", `"instance":"pool-b"`) {
		t.Log(line) // the fast path's probe (internal/connection), when it was first
	}
	if v := metric(t, "caddy_dicer_wakes_started_total", `kind="dicer"`, `cause="load"`); v < 1 {
		t.Errorf("caddy_dicer_wakes_started_total{kind=dicer,cause=load} = %v, want at least 1", v)
	}
	if v := metric(t, "caddy_dicer_pool_instances", `kind="dicer"`, `state="running"`); v < 2 {
		t.Errorf("caddy_dicer_pool_instances{kind=dicer,state=running} = %v, want at least 2", v)
	}
}
