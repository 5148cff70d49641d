//go:build soak && linux

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// testDaemon is bin/dicer-testd run by the soak: Dicer's API on a unix
// socket, its control API next to it.
type testDaemon struct {
	socket string
	ctl    *http.Client
}

// startTestDaemon runs bin/dicer-testd with its sockets in dir, in a
// process group of its own that dies with the test process (its instance
// processes die with it); it is stopped when t ends and by r.
func startTestDaemon(t *testing.T, r *reaper, dir string) *testDaemon {
	t.Helper()
	d := &testDaemon{socket: filepath.Join(dir, "dicer.sock")}
	log, err := os.Create(filepath.Join(dir, "dicer-testd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testdBin, "-socket", d.socket)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	r.add(kill)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			kill()
			<-done
		}
		log.Close()
	})
	ctl := d.socket + ".ctl"
	d.ctl = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", ctl)
		},
		MaxIdleConnsPerHost: 16,
	}}
	testkit.Eventually(t, 10*time.Second, "dicer-testd's control socket", func() bool {
		_, err := os.Stat(ctl)
		return err == nil
	})
	return d
}

// run creates and starts an instance named name with labels (its
// control API's POST /instances) and returns its ID.
func (d *testDaemon) run(name string, labels map[string]string) (string, error) {
	return d.runAt(name, "", labels)
}

// runAt is run on the address ip ("": the daemon's choice, the first
// free from 127.0.0.100).
func (d *testDaemon) runAt(name, ip string, labels map[string]string) (string, error) {
	body, _ := json.Marshal(map[string]any{"name": name, "labels": labels, "ip": ip})
	res, err := d.ctl.Post("http://dicer/instances", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("run %s: %w", name, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("run %s: %d %s", name, res.StatusCode, bytes.TrimSpace(b))
	}
	var inst struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &inst); err != nil || inst.ID == "" {
		return "", fmt.Errorf("run %s: no id in %s", name, b)
	}
	return inst.ID, nil
}

// rm stops and deletes the instance.
func (d *testDaemon) rm(name string) error {
	req, _ := http.NewRequest(http.MethodDelete, "http://dicer/instances/"+name, nil)
	res, err := d.ctl.Do(req)
	if err != nil {
		return fmt.Errorf("rm %s: %w", name, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("rm %s: %d %s", name, res.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// fleetCaddy is one of the soak's Caddys (a slot: a, b, c). Its ports
// stay across its restarts; each restart gives it a fresh HOME, so a new
// instance ID in the fleet, as a redeployed Caddy container gets.
type fleetCaddy struct {
	slot                 string
	admin, http, https   int
	engine               int // the port of the Engine's site
	config               func(p *fleetCaddy) string
	root                 string
	mu                   sync.RWMutex // held by a restart; users hold it for reading
	proc                 *testkit.CaddyProcess
	restarts             int
	client, streamClient *http.Client
	startedAt            time.Time
}

// newFleetCaddy makes the Caddy of slot with free ports and starts it.
func newFleetCaddy(t *testing.T, r *reaper, slot, root string, config func(p *fleetCaddy) string) *fleetCaddy {
	t.Helper()
	free := func() int { return testkit.FreePort(t, "127.0.0.1") }
	p := &fleetCaddy{slot: slot, admin: free(), http: free(), https: free(), engine: free(), config: config, root: root,
		client:       &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}},
		streamClient: &http.Client{Timeout: time.Minute}}
	r.add(func() {
		p.mu.RLock() // a restart under way finishes first
		defer p.mu.RUnlock()
		if p.proc != nil {
			p.proc.Kill()
		}
	})
	p.start(t)
	return p
}

// start runs the Caddy with a fresh HOME (and data directory).
func (p *fleetCaddy) start(t *testing.T) {
	t.Helper()
	home, err := os.MkdirTemp(p.root, "caddy-"+p.slot+"-")
	if err != nil {
		t.Fatal(err)
	}
	proc := &testkit.CaddyProcess{Name: p.slot, Bin: caddyBin, Home: home, Admin: p.admin,
		// The Caddy dies with the test process, even by SIGKILL.
		Wrap: []string{"setpriv", "--pdeathsig", "KILL", "--"}}
	proc.Config = filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(proc.Config, []byte(p.config(p)), 0o644); err != nil {
		t.Fatal(err)
	}
	proc.Start(t)
	// The admin endpoint answers before the sites listen: wait for them
	// too, so that no request of the soak meets a Caddy half started.
	for _, port := range []int{p.http, p.engine, p.https} {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		testkit.Eventually(t, 30*time.Second, "Caddy "+p.slot+" listens on "+addr, func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	p.proc, p.startedAt = proc, time.Now()
}

// restart stops the Caddy (SIGINT) and starts it with a fresh HOME.
func (p *fleetCaddy) restart(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proc.Stop()
	p.start(t)
	p.restarts++
}

// get sends GET path for host to the site on port, through this Caddy.
func (p *fleetCaddy) get(port int, host, path string) (int, string, error) {
	c := p.client
	if strings.HasPrefix(path, "/drip") {
		c = p.streamClient
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// served is who answered each of n requests for host (the body's name).
func (p *fleetCaddy) served(port int, host string, n int) map[string]int {
	out := map[string]int{}
	for range n {
		if status, body, err := p.get(port, host, "/"); err == nil && status == 200 {
			out[strings.TrimSpace(strings.TrimPrefix(body, "hello from "))]++
		} else {
			out["!failed"]++
		}
	}
	return out
}

// adminPost POSTs body to path on the Caddy's admin endpoint.
func (p *fleetCaddy) adminPost(path, body string) (int, string) {
	res, err := p.client.Post(fmt.Sprintf("http://127.0.0.1:%d%s", p.admin, path), "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// metrics is the Caddy's /metrics text ("" on failure).
func (p *fleetCaddy) metrics() string {
	res, err := p.client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.admin))
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// engineContainer starts a container of the test image on the Engine,
// named dockertest.Name(name), labelled with the run's label (the soak's
// Engine route selects it) and labels.
func engineContainer(ctx context.Context, cli client.APIClient, name string, labels map[string]string, opts dockertest.Options) (dockertest.Container, error) {
	opts.Name, opts.Labels = name, labels
	return dockertest.StartContainer(ctx, cli, opts)
}
