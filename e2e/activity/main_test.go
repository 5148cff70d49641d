//go:build e2e && linux

// Package activity is the end-to-end test of idle by activity (R5r):
// Caddy built with xcaddy and this checkout's plugin, as the docs tell
// users to build it, in its own process, in front of containers of the
// test image on the real Docker Engine: a container busy with no request
// open is kept awake by caddy.standby_cpu, and a monitor's requests that
// caddy.standby_ignore names neither keep a container awake nor wake it.
package activity

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// The run's shared fixture, set before m.Run.
var (
	cli      *client.Client
	caddyBin string
)

func TestMain(m *testing.M) {
	// Every container its Caddys see is made by dockertest: they follow
	// this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(dockertest.MainE2E(m, "e2e/activity", &cli, &caddyBin))
}

// caddyProc is the Caddy of a test: its process, ports and log.
type caddyProc struct {
	testkit.CaddyProcess
	http int
}

// newCaddy starts a Caddy routing by the containers' caddy.host labels
// on port 8080, stopped when the test ends.
func newCaddy(t *testing.T) *caddyProc {
	t.Helper()
	p := &caddyProc{http: testkit.FreePort(t, "127.0.0.1")}
	admin := testkit.FreePort(t, "127.0.0.1")
	p.CaddyProcess = testkit.CaddyProcess{Name: "activity", Bin: caddyBin, Home: t.TempDir(), Admin: admin}
	p.Config = filepath.Join(p.Home, "Caddyfile")
	site := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	http_port %d
	auto_https off
}

:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
		}
	}
}
`, admin, p.http, p.http)
	if err := os.WriteFile(p.Config, []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start(t)
	return p
}

// answer is what Caddy answered a request.
type answer struct {
	status int
	state  string // the Dicer-State header
	body   string
	err    error
}

func (a answer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d Dicer-State=%q %q", a.status, a.state, a.body)
}

// get sends GET path for host to the Caddy with the User-Agent ua.
func (p *caddyProc) get(host, path, ua string, timeout time.Duration) answer {
	c := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.http, path), nil)
	if err != nil {
		return answer{err: err}
	}
	req.Host = host
	req.Header.Set("User-Agent", ua)
	res, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, state: res.Header.Get("Dicer-State"), body: string(b), err: err}
}
