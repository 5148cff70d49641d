//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// caddyProc is the Caddy binary under test, running as a child process on a
// generated Caddyfile, with the admin API on loopback and its log in a file.
type caddyProc struct {
	cmd       *exec.Cmd
	dir       string // its HOME, XDG_CONFIG_HOME, XDG_DATA_HOME, Caddyfile, logs
	admin     string // host:port of the admin API
	httpPort  int
	httpsPort int
	logFile   string // Caddy's JSON log (level DEBUG)
	outFile   string // its stdout and stderr
	exited    chan struct{}
	client    *http.Client
}

// freeTCPPort returns a port no socket used a moment ago, on any address.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCaddy runs `caddy run` on a Caddyfile made of the suite's global
// options plus globals, followed by sites, and waits until it serves. In
// sites, {http} and {https} are the ports Caddy listens on. Caddy is
// stopped when t ends; if t failed, the tail of its log is printed.
func startCaddy(t *testing.T, globals, sites string) *caddyProc {
	t.Helper()
	dir := t.TempDir()
	c := &caddyProc{
		dir:       dir,
		admin:     fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)),
		httpPort:  freeTCPPort(t),
		httpsPort: freeTCPPort(t),
		logFile:   filepath.Join(dir, "caddy.log"),
		outFile:   filepath.Join(dir, "caddy.out"),
		exited:    make(chan struct{}),
	}
	sites = strings.NewReplacer("{http}", fmt.Sprint(c.httpPort), "{https}", fmt.Sprint(c.httpsPort)).Replace(sites)
	config := fmt.Sprintf(`{
	admin %s
	http_port %d
	https_port %d
	grace_period 1s
	skip_install_trust
	persist_config off
	log {
		output file %s
		format json
		level DEBUG
	}
%s
}
%s
`, c.admin, c.httpPort, c.httpsPort, c.logFile, indent(globals), sites)
	caddyfile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(caddyfile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(c.outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c.cmd = exec.Command(caddyBin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	c.cmd.Dir = dir
	c.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.stop(t) })
	c.client = &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", c.httpPort))
			},
			MaxIdleConnsPerHost: 16,
		},
	}

	// "serving initial configuration" is logged once the config is loaded
	// and every app has started.
	if !testkit.Until(30*time.Second, func() bool {
		if !c.running() {
			t.Fatalf("caddy exited at start: %v\nCaddyfile:\n%s\noutput:\n%s", c.cmd.ProcessState, config, readFile(c.outFile))
		}
		return c.count("serving initial configuration", nil) > 0
	}) {
		t.Fatalf("caddy did not start within 30s\noutput:\n%s", readFile(c.outFile))
	}
	t.Logf("caddy pid %d serving on :%d and :%d", c.cmd.Process.Pid, c.httpPort, c.httpsPort)
	return c
}

// stop ends Caddy (SIGTERM, then SIGKILL after 10s) and, if t failed,
// prints the end of its log.
func (c *caddyProc) stop(t *testing.T) {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	c.client.CloseIdleConnections()
	if t.Failed() {
		t.Logf("caddy output:\n%s\ncaddy log (last 60 lines):\n%s", readFile(c.outFile), tail(readFile(c.logFile), 60))
	}
}

// running reports whether the Caddy process started for the test is still
// alive.
func (c *caddyProc) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// result is one request's outcome.
type result struct {
	status int
	body   string
	err    error
	took   time.Duration
}

func (r result) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d %q", r.status, r.body)
}

// get sends GET http://<host>/ to Caddy's HTTP port.
func (c *caddyProc) get(host string) result { return c.getContext(context.Background(), host) }

// burst sends n requests for host at once and returns their results, in
// the order they were sent.
func (c *caddyProc) burst(host string, n int) []result {
	return testkit.Burst(n, func() result { return c.get(host) })
}

// getContext is get, given up when ctx ends.
func (c *caddyProc) getContext(ctx context.Context, host string) result {
	r := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", c.httpPort), Client: c.client}.Get(ctx, host, "/")
	return result{status: r.Status, body: r.Body, err: r.Err, took: r.Took}
}

// config returns Caddy's current config from the admin API.
func (c *caddyProc) config(t *testing.T) []byte {
	t.Helper()
	return []byte(testkit.AdminGet(t, c.admin, "/config/"))
}

// logEntries returns Caddy's log, one decoded JSON object per line.
func (c *caddyProc) logEntries() []map[string]any { return testkit.LogEntries(c.logFile) }

// count returns how many log entries have message msg and, for each
// key in fields, that value (compared as printed).
func (c *caddyProc) count(msg string, fields map[string]string) int {
	n := 0
next:
	for _, e := range c.logEntries() {
		if e["msg"] != msg {
			continue
		}
		for k, v := range fields {
			if fmt.Sprint(e[k]) != v {
				continue next
			}
		}
		n++
	}
	return n
}

// countPrefix returns how many log entries have a message that starts
// with prefix.
func (c *caddyProc) countPrefix(prefix string) int {
	n := 0
	for _, e := range c.logEntries() {
		if msg, ok := e["msg"].(string); ok && strings.HasPrefix(msg, prefix) {
			n++
		}
	}
	return n
}

// logContains reports whether Caddy's log or output holds s.
func (c *caddyProc) logContains(s string) bool {
	return strings.Contains(readFile(c.logFile), s) || strings.Contains(readFile(c.outFile), s)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.Trim(s, "\n"), "\n") {
		if l != "" {
			b.WriteString("\t" + l)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
