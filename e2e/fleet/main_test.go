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
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	// Every container its Caddys see is made by dockertest: they follow
	// this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(dockertest.MainE2E(m, "e2e/fleet", &cli, &caddyBin))
}

// caddyProc is one Caddy of the fleet: its process, HOME, ports and log.
type caddyProc struct {
	testkit.CaddyProcess
	name        string
	admin, http int
	t           *testing.T
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
	p := &caddyProc{name: name, admin: testkit.FreePort(t, "127.0.0.1"), http: testkit.FreePort(t, "127.0.0.1"), t: t}
	p.CaddyProcess = testkit.CaddyProcess{Name: name, Bin: caddyBin, Home: t.TempDir(), Admin: p.admin}
	p.Config = filepath.Join(p.Home, "Caddyfile")
	if err := os.WriteFile(p.Config, []byte(fleetSite(p.admin, p.http, storage)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	return p
}

// start (re)starts the Caddy and waits until its admin endpoint answers.
func (p *caddyProc) start() { p.t.Helper(); p.Start(p.t) }

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
