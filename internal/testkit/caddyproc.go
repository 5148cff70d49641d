package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// caddyModule is the plugin's module path, for xcaddy's --with.
const caddyModule = "github.com/caddy-dicer/caddy-dicer"

// BuildCaddy builds Caddy with the plugin of the checkout at root (an
// absolute path), with xcaddy as docs/install.md says, into dir, and
// returns the binary. CADDY_DICER_E2E_PLAIN_CADDY=<path> reuses a build
// of the plugin alone (no other module): `make test-e2e` passes
// bin/caddy, built once for the end-to-end packages that need no other
// module; a missing path is built there. CADDY_VERSION and XCADDY_VERSION choose the versions.
func BuildCaddy(root, dir string) (string, error) {
	bin := filepath.Join(dir, "caddy")
	if keep := os.Getenv("CADDY_DICER_E2E_PLAIN_CADDY"); keep != "" {
		keep, err := filepath.Abs(keep)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(keep); err == nil {
			return keep, nil
		}
		bin = keep
	}
	caddyVersion, xcaddyVersion := envOr("CADDY_VERSION", "v2.11.9"), envOr("XCADDY_VERSION", "v0.4.5")
	cmd := exec.Command("go", "run", "github.com/caddyserver/xcaddy/cmd/xcaddy@"+xcaddyVersion,
		"build", caddyVersion,
		// xcaddy resolves an unpublished module only at the zero pseudo-version.
		"--with", caddyModule+"@v0.0.0-00010101000000-000000000000="+root,
		"--output", bin)
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("xcaddy build: %v\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "built Caddy at %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// CaddyProcess is a Caddy run as users run it: its own process, HOME and
// admin address, a Caddyfile, its output in a log file.
type CaddyProcess struct {
	// Name names it in messages.
	Name string
	// Bin is the Caddy binary; Home its HOME (and XDG folders); Config
	// its Caddyfile; Admin its admin port on 127.0.0.1, which Start
	// waits for.
	Bin, Home, Config string
	Admin             int
	// Wrap, if set, runs Caddy through another command: its arguments
	// come before Caddy's (e.g. nsenter --net=...).
	Wrap []string

	cmd     *exec.Cmd
	logPath string
	logFile *os.File
}

// Start runs the Caddy and waits until its admin endpoint answers; it
// is stopped when t ends, its log's tail printed if t failed.
func (p *CaddyProcess) Start(t testing.TB) {
	t.Helper()
	if p.logPath == "" {
		p.logPath = filepath.Join(p.Home, "caddy.log")
		t.Cleanup(func() {
			p.Stop()
			if t.Failed() {
				t.Logf("Caddy %s's log (tail):\n%s", p.Name, tailLines(p.LogText(), 60))
			}
		})
	}
	var err error
	if p.logFile, err = os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, p.Wrap...), p.Bin, "run", "--config", p.Config, "--adapter", "caddyfile")
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.logFile, p.logFile
	p.cmd.Env = append(os.Environ(), "HOME="+p.Home, "XDG_DATA_HOME="+p.Home, "XDG_CONFIG_HOME="+p.Home)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.Admin), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy %s's admin endpoint did not answer within 30s: %v\n%s", p.Name, err, p.LogText())
		}
		time.Sleep(50 * time.Millisecond) // poll the condition
	}
}

// Stop stops the Caddy (SIGINT, then SIGKILL after 10 s), if it runs.
func (p *CaddyProcess) Stop() {
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

// Kill stops the Caddy with SIGKILL, as a crash would.
func (p *CaddyProcess) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.logFile.Close()
}

// Pid is the Caddy's process ID.
func (p *CaddyProcess) Pid() int { return p.cmd.Process.Pid }

// LogText is what the Caddy wrote so far.
func (p *CaddyProcess) LogText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func tailLines(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
