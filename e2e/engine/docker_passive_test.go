package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R1d: Caddy's passive health state, kept by dial address, does not pass
// from a removed container to a new one that gets its IP. With max_fails
// 1 and fail_duration 30s, the old container fails once (a 503 counted by
// unhealthy_status) and is removed; a new one on the same network gets the
// same address and must be answered at once, not 30 s later. explain shows
// the failure Caddy counts for the old target.
func TestDocker_R1d_passive_health_does_not_pass_to_a_new_container_at_an_old_IP(t *testing.T) {
	cli := engine(t)
	net := dockertest.CreateNetwork(t, cli, "r1d-net")
	app := dockertest.Name("r1d")
	host := hostName("r1d")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		fail_duration 30s
		max_fails 1
		unhealthy_status 503
		%s
	}
}`, httpPort, app, upstreamHeader))
	old := dockertest.Start(t, cli, dockertest.Options{Name: "r1d-old", Network: net, Labels: map[string]string{"app": app}})
	ip := containerIP(t, cli, old, net)
	answersWithin(t, tester, host, http.StatusOK, hello("r1d-old"), waitFor)

	// One failure: the app says it is unhealthy, and Caddy counts the 503.
	if r := send(t, http.MethodPost, host, "/health/bad"); r.status != http.StatusOK {
		t.Fatalf("POST /health/bad: %s", r)
	}
	if r := send(t, http.MethodGet, host, "/healthz"); r.status != http.StatusServiceUnavailable {
		t.Fatalf("GET /healthz: %s, want the app's 503", r)
	}
	var ex diceradmin.Explanation
	adminJSON(t, "/dicer/explain?host="+url.QueryEscape(host), &ex)
	if !explainsPassiveFailure(ex, "r1d-old") {
		t.Errorf("explain does not show Caddy's passive failure of the old container: %+v", ex.Routes)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerRemove(ctx, old.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	fresh := dockertest.Start(t, cli, dockertest.Options{Name: "r1d-new", Network: net, Labels: map[string]string{"app": app}})
	if got := containerIP(t, cli, fresh, net); got != ip {
		t.Skipf("the Engine gave the new container %s, not the old one's %s: nothing to test", got, ip)
	}
	_, took := answersWithin(t, tester, host, http.StatusOK, hello("r1d-new"), 10*time.Second)
	t.Logf("the new container at %s was answered %s after it started", ip, took.Round(time.Millisecond))
}

// send sends one request for host through Caddy and returns its answer.
func send(t *testing.T, method, host, path string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d%s", httpPort, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	return reply{status: res.StatusCode, upstream: res.Header.Get("X-Upstream")}
}

// explainsPassiveFailure reports whether ex shows a passive failure for
// the named target.
func explainsPassiveFailure(ex diceradmin.Explanation, instance string) bool {
	for _, r := range ex.Routes {
		for _, c := range r.Candidates {
			if strings.HasSuffix(c.Instance, instance) && c.Target && c.PassiveFails > 0 && strings.Contains(c.Why, "passive health") {
				return true
			}
		}
	}
	return false
}

// sameDial reports whether dial address got reaches want: the same address
// and port, whatever the spelling (R1d: a container at an address another
// had before is dialled under another one).
func sameDial(got, want string) bool {
	g, err1 := netip.ParseAddrPort(got)
	w, err2 := netip.ParseAddrPort(want)
	return err1 == nil && err2 == nil && g.Port() == w.Port() && g.Addr().Unmap() == w.Addr().Unmap()
}
