//go:build e2e && linux

// Package fleet is the end-to-end test of several Caddys acting as one
// (R5m, R4e): Caddy built with xcaddy and this checkout's plugin, as the
// docs tell users to build it; two or three Caddy processes, each with its
// own HOME and admin address, one shared `storage file_system` folder, the
// real Docker Engine and containers of the test image.
//
// A Redis storage module (github.com/pberkel/caddy-storage-redis) was
// tried and is not served by the module proxy here: the shared folder is
// the storage tested.
package fleet

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

const module = "github.com/caddy-dicer/caddy-dicer"

// The run's shared fixture, set before m.Run.
var (
	cli      *client.Client
	caddyBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/fleet: skipped under -short: needs the Docker Engine and the network to build Caddy; run make test-e2e")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if cli, err = dockertest.NewClient(); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/fleet: no Engine client: %v\n", err)
		return 1
	}
	defer cli.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/fleet: cleanup: %v\n", err)
		}
	}()
	dir, err := os.MkdirTemp("", "cdfleet-build")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/fleet: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if caddyBin, err = buildCaddy(dir); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/fleet: %v\n", err)
		return 1
	}
	return m.Run()
}

// buildCaddy builds Caddy with this checkout's plugin, as docs/install.md
// says, into dir. CADDY_DICER_E2E_FLEET_CADDY=<path> reuses a build
// between runs (built there if missing; remove it after changing the
// code).
func buildCaddy(dir string) (string, error) {
	bin := filepath.Join(dir, "caddy")
	if keep := os.Getenv("CADDY_DICER_E2E_FLEET_CADDY"); keep != "" {
		keep, err := filepath.Abs(keep)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(keep); err == nil {
			return keep, nil
		}
		bin = keep
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	caddyVersion, xcaddyVersion := envOr("CADDY_VERSION", "v2.11.9"), envOr("XCADDY_VERSION", "v0.4.5")
	cmd := exec.Command("go", "run", "github.com/caddyserver/xcaddy/cmd/xcaddy@"+xcaddyVersion,
		"build", caddyVersion,
		// xcaddy resolves an unpublished module only at the zero pseudo-version.
		"--with", module+"@v0.0.0-00010101000000-000000000000="+root,
		"--output", bin)
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("xcaddy build: %v\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "e2e/fleet: built Caddy at %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// caddyProc is one Caddy of the fleet: its process, HOME, ports and log.
type caddyProc struct {
	name         string
	home, config string
	admin, http  int
	cmd          *exec.Cmd
	logPath      string
	logFile      *os.File
	t            *testing.T
}

// fleetSite is the Caddyfile of a Caddy of the fleet: its admin and HTTP
// ports, the shared storage folder, and a route by the containers'
// caddy.host labels, on port 8080, that says which answered.
func fleetSite(admin, httpPort int, storage string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	storage file_system %s
	http_port %d
	auto_https off
}

:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
		}
		lb_policy dicer_weighted
		flush_interval -1
		header_down X-Upstream {http.reverse_proxy.upstream.hostport}
	}
}
`, admin, storage, httpPort, httpPort)
}

// newCaddy makes a Caddy of the fleet named name, with its own HOME, and
// starts it; it is stopped when the test ends.
func newCaddy(t *testing.T, name, storage string) *caddyProc {
	t.Helper()
	p := &caddyProc{name: name, home: t.TempDir(), admin: testkit.FreePort(t, "127.0.0.1"), http: testkit.FreePort(t, "127.0.0.1"), t: t}
	p.config = filepath.Join(p.home, "Caddyfile")
	if err := os.WriteFile(p.config, []byte(fleetSite(p.admin, p.http, storage)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.logPath = filepath.Join(p.home, "caddy.log")
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("Caddy %s's log (tail):\n%s", name, tail(p.logText(), 60))
		}
	})
	return p
}

// start runs the Caddy and waits until its admin endpoint answers.
func (p *caddyProc) start() {
	t := p.t
	t.Helper()
	var err error
	if p.logFile, err = os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(caddyBin, "run", "--config", p.config, "--adapter", "caddyfile")
	p.cmd.Stdout, p.cmd.Stderr = p.logFile, p.logFile
	p.cmd.Env = append(os.Environ(), "HOME="+p.home, "XDG_DATA_HOME="+p.home, "XDG_CONFIG_HOME="+p.home)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.admin), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy %s's admin endpoint did not answer within 30s: %v\n%s", p.name, err, p.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops the Caddy (SIGINT, then SIGKILL after 10 s), if it runs.
func (p *caddyProc) stop() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.logFile.Close()
}

// kill stops the Caddy with SIGKILL, as a crash would.
func (p *caddyProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.logFile.Close()
}

func (p *caddyProc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// get sends GET path for host to the Caddy, and returns the status, the
// body and the container that answered (X-Upstream's host:port).
func (p *caddyProc) get(host, path string, timeout time.Duration) (int, string, string, error) {
	c := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.http, path), nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Host = host
	res, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header.Get("X-Upstream"), err
}

// adminPost POSTs body to path on the Caddy's admin endpoint.
func (p *caddyProc) adminPost(path, body string) (int, string) {
	res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", p.admin, path), "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// adminGet GETs path from the Caddy's admin endpoint, "" on failure.
func (p *caddyProc) adminGet(path string) string {
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", p.admin, path))
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
