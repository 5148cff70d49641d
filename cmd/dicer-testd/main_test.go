//go:build unix

package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// asProgramEnv makes this test binary run as dicer-testd itself: the
// daemon the tests start runs each instance's process that way.
const asProgramEnv = "DICER_TESTD_TEST_AS_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(asProgramEnv) == "1" {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// startTestDaemon starts the daemon in process on sockets in a temp folder
// and returns it and its gRPC socket.
func startTestDaemon(t *testing.T, instances string) (*daemon, string) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "d.sock")
	dm, err := startDaemon(daemonConfig{
		socket: socket, instances: instances,
		command: instanceCommand(os.Args[0], []string{asProgramEnv + "=1"}),
		logf:    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dm.close)
	return dm, socket
}

// runCLI runs dicer-testd with args and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli(args, &out, &errOut)
	t.Logf("dicer-testd %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

func mustRunCLI(t *testing.T, wantPrefix string, args ...string) string {
	t.Helper()
	code, out, _ := runCLI(t, args...)
	if code != exitOK || !strings.HasPrefix(out, wantPrefix) {
		t.Fatalf("dicer-testd %s: exit %d, %q; want exit 0 and output starting %q", strings.Join(args, " "), code, out, wantPrefix)
	}
	return out
}

// get GETs http://addr/ on a new connection.
func get(addr string, timeout time.Duration) (string, error) {
	c := http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func mustAnswer(t *testing.T, addr, name string) {
	t.Helper()
	body, err := get(addr, 10*time.Second)
	if want := "hello from " + name + "\n"; err != nil || body != want {
		t.Fatalf("GET %s: %q, %v; want %q", addr, body, err, want)
	}
}

// The CLI drives the daemon as the example's hints do: an instance run
// serves HTTP and is recorded with its labels; put on standby, a
// connection to its published port wakes it; stopped, it serves nothing;
// started, it serves again; removed, it is gone from ls.
func TestCLI_RunStandbyStopStartRm(t *testing.T) {
	dm, sock := startTestDaemon(t, "")
	port := testkit.FreePort(t, "127.0.0.1")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	mustRunCLI(t, "api: running at 127.0.0.1, port "+strconv.Itoa(port)+" published on host port ",
		"run", "--socket", sock, "--name", "api", "--label", "caddy.host=api.localhost", "--label", "tier=front",
		"--standby-after", "1m", "--ip", "127.0.0.1", "--port", strconv.Itoa(port))
	mustAnswer(t, addr, "api")
	rec := dm.d.Instance("api")
	if got := formatLabels(rec.GetLabels()); got != "caddy.host=api.localhost,tier=front" {
		t.Errorf("labels %s", got)
	}
	if rec.GetStandbyAfter().AsDuration() != time.Minute || len(rec.GetPorts()) != 1 || rec.GetPorts()[0].GetHostPort() == 0 {
		t.Fatalf("recorded standby_after %v, ports %v; want 1m and one published port", rec.GetStandbyAfter(), rec.GetPorts())
	}
	published := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(rec.GetPorts()[0].GetHostPort())))

	out := mustRunCLI(t, "NAME", "ls", "--socket", sock)
	if !strings.Contains(out, "api ") || !strings.Contains(out, " running ") || !strings.Contains(out, "caddy.host=api.localhost,tier=front") {
		t.Errorf("ls does not show api running with its labels:\n%s", out)
	}

	// Flags may follow the name, as in `stop api --socket s`.
	mustRunCLI(t, "api: on standby", "standby", "api", "--socket", sock)
	if s := dm.d.Instance("api").GetState(); s != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		t.Fatalf("after standby the record says %v", s)
	}
	mustAnswer(t, published, "api") // the connection wakes it
	rec = dm.d.Instance("api")
	if rec.GetState() != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		t.Fatalf("after a connection to the published port the record says %v; want running", rec.GetState())
	}
	if ev := lastEvent(t, dm.d, "api"); ev.GetAttributes()["woken_by_port"] != strconv.Itoa(int(rec.GetPorts()[0].GetHostPort())) {
		t.Errorf("last event %v; want STARTED woken_by_port", ev)
	}

	mustRunCLI(t, "api: stopped", "stop", "--socket", sock, "api")
	if body, err := get(addr, 10*time.Second); err == nil {
		t.Fatalf("a stopped instance answered %q", body)
	}
	mustRunCLI(t, "api: running", "start", "--socket", sock, "api")
	mustAnswer(t, addr, "api")

	mustRunCLI(t, "api: removed", "rm", "--socket", sock, "api")
	if dm.d.Instance("api") != nil {
		t.Fatal("rm left the instance recorded")
	}
	if out := mustRunCLI(t, "NAME", "ls", "--socket", sock); strings.Contains(out, "api") {
		t.Errorf("ls still shows api:\n%s", out)
	}
}

// What the CLI refuses, with the exit code and the words a user sees.
func TestCLI_Refusals(t *testing.T) {
	dm, sock := startTestDaemon(t, "")
	port := strconv.Itoa(testkit.FreePort(t, "127.0.0.1"))
	mustRunCLI(t, "web: running", "run", "--socket", sock, "--name", "web", "--ip", "127.0.0.1", "--port", port)
	mustRunCLI(t, "web: stopped", "stop", "--socket", sock, "web")
	missing := filepath.Join(t.TempDir(), "none.sock")

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"run", "--socket", sock}, exitUsage, "give the instance a --name"},
		{[]string{"run", "--socket", sock, "--name", "x", "--label", "nokey"}, exitUsage, `"nokey" is not key=value`},
		{[]string{"run", "--socket", sock, "--name", "x", "--ip", "10.0.0.1"}, exitFail, "not in 127.0.0.0/8"},
		{[]string{"run", "--socket", sock, "--name", "web", "--ip", "127.0.0.1", "--port", port}, exitFail, `instance "web" exists`},
		{[]string{"run", "--socket", sock, "--name", "a/b"}, exitFail, "use up to 63 letters"},
		{[]string{"run", "--socket", sock, "--name", "y", "--ip", "127.0.0.1"}, exitFail, `ip 127.0.0.1 is instance "web"'s`},
		{[]string{"stop", "--socket", sock}, exitUsage, "name the instances"},
		{[]string{"stop", "--socket", sock, "nosuch"}, exitFail, `no such instance: "nosuch"`},
		{[]string{"standby", "--socket", sock, "web"}, exitFail, `instance "web" is stopped`},
		{[]string{"ls", "--socket", missing}, exitFail, "no test daemon answers on " + missing},
		{[]string{"stop", "--socket", missing, "web"}, exitFail, "no test daemon answers on " + missing + ".ctl"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("dicer-testd %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.says)
		}
	}
	if dm.d.Instance("x") != nil || dm.d.Instance("y") != nil {
		t.Error("a refused run recorded an instance")
	}
	if fi, err := os.Stat(controlPath(sock)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, %v; want mode 0600 (it runs processes)", fi, err)
	}
}

// The -instances file runs its instances as processes too, so that the
// commands work on them; one with "health" is reported healthy.
func TestDaemon_InstancesFile(t *testing.T) {
	port := testkit.FreePort(t, "127.0.0.1")
	file := filepath.Join(t.TempDir(), "instances.json")
	spec := `[{"name":"web-1","labels":{"app":"web"},"ip":"127.0.0.1","port":` + strconv.Itoa(port) + `,"health":true}]`
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	dm, sock := startTestDaemon(t, file)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	mustAnswer(t, addr, "web-1")
	if h := dm.d.Instance("web-1").GetHealth().GetStatus(); h != dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY {
		t.Errorf("health %v; want healthy", h)
	}
	mustRunCLI(t, "web-1: stopped", "stop", "--socket", sock, "web-1")
	mustRunCLI(t, "web-1: running at 127.0.0.1, health healthy", "start", "--socket", sock, "web-1")
	mustAnswer(t, addr, "web-1")
}

func lastEvent(t *testing.T, d interface{ Events() []*dicerpb.Event }, name string) *dicerpb.Event {
	t.Helper()
	evs := d.Events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].GetName() == name {
			return evs[i]
		}
	}
	t.Fatalf("no event for %s", name)
	return nil
}
