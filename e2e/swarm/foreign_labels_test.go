//go:build e2e && linux

package swarm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R2f on Swarm: services whose deploy labels are caddy-docker-proxy's or
// Traefik's route, under `labels caddy-dicer caddy-docker-proxy traefik`,
// on a site without strip_path_prefix: a handle_path one with its prefix
// stripped, a Traefik PathPrefix one with it kept (R2d, per service);
// one asking for basic_auth is not routed, warned about and counted in
// caddy_dicer_foreign_labels_refused_total{kind="swarm"}.
func TestSwarm_R2f_foreign_labels_route_or_fail_closed(t *testing.T) {
	cdp, trf, auth := "cdp.foreign.swarm.test", "traefik.foreign.swarm.test", "auth.foreign.swarm.test"
	refusedBefore := refusedCount(t)
	s1 := createServiceFor(t, "fcdp", "", helloV1, 1,
		"--label", "caddy="+cdp, "--label", "caddy.handle_path=/pre/*",
		"--label", "caddy.handle_path.0_reverse_proxy={{upstreams 8080}}")
	s2 := createServiceFor(t, "ftraefik", "", helloV1, 1,
		"--label", "traefik.http.routers.app.rule=Host(`"+trf+"`) && PathPrefix(`/app`)",
		"--label", "traefik.http.services.app.loadbalancer.server.port=8080")
	s3 := createServiceFor(t, "fauth", "", helloV1, 1,
		"--label", "caddy="+auth, "--label", "caddy.reverse_proxy={{upstreams 8080}}",
		"--label", "caddy.basic_auth.admin=$2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG")
	waitRunning(t, s1, 1)
	waitRunning(t, s2, 1)
	waitRunning(t, s3, 1)
	answers := func(host, path, body string) {
		t.Helper()
		var last testkit.Result
		if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
			last = testkit.Caddy{Addr: caddyAddr, Client: httpClient}.Get(context.Background(), host, path)
			return last.Err == nil && last.Status == http.StatusOK && strings.HasPrefix(last.Body, body)
		}) {
			t.Fatalf("%s%s: %d %q %v, want 200 %q; Caddy's log:\n%s", host, path, last.Status, last.Body, last.Err, body, caddyLog("R2f"))
		}
	}
	answers(cdp, "/pre/healthz", "ok\n")        // stripped: the app's /healthz
	answers(trf, "/app/healthz", "hello from ") // kept: not the app's /healthz
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		return caddyLogHas("(R2f)", "caddy.basic_auth.admin") && refusedCount(t) > refusedBefore
	}) {
		t.Fatalf("no warning or count for the basic_auth service: count %v; log:\n%s", refusedCount(t), caddyLog("R2f"))
	}
	if r := (testkit.Caddy{Addr: caddyAddr, Client: httpClient}).Get(context.Background(), auth, "/"); r.Status != http.StatusServiceUnavailable {
		t.Errorf("%s: %d %q, want 503: not routed", auth, r.Status, r.Body)
	}
	if caddyLogHas("(R2f)", "$2a$14$") {
		t.Error("a warning shows the basic_auth hash")
	}
}

// refusedCount is caddy_dicer_foreign_labels_refused_total{kind="swarm",
// set="caddy-docker-proxy"} from Caddy's metrics.
func refusedCount(t *testing.T) float64 {
	t.Helper()
	status, body, err := get(context.Background(), metricsHost)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET metrics: %d %v", status, err)
	}
	sum := 0.0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "caddy_dicer_foreign_labels_refused_total{") && strings.Contains(l, `kind="swarm"`) && strings.Contains(l, `set="caddy-docker-proxy"`) {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
