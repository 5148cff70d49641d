package engine

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R2f on the real Engine, through a real Caddy: with `labels caddy-dicer
// caddy-docker-proxy traefik`, containers labelled as caddy-docker-proxy's
// README and Traefik's docs label them route unchanged, the prefix
// stripped or kept per container whatever the source's strip_path_prefix
// (R2d: a handle_path one, under a source without strip_path_prefix, has
// its prefix stripped; a handle one, under a source with it, and a
// Traefik PathPrefix one keep it), and the ones whose labels ask for
// basic_auth or a middleware are not routed at all, each warned about
// once and counted in caddy_dicer_foreign_labels_refused_total.
func TestDocker_R2f_foreign_labels_route_or_fail_closed(t *testing.T) {
	cli := engine(t)
	plain, strip, auth := hostName("r2f-cdp"), hostName("r2f-strip"), hostName("r2f-auth")
	trf, mw, keep := hostName("r2f-traefik"), hostName("r2f-mw"), hostName("r2f-handle")
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-cdp", Labels: map[string]string{
		"caddy": plain, "caddy.reverse_proxy": "{{upstreams 8080}}"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-strip", Labels: map[string]string{
		"caddy": strip, "caddy.handle_path": "/pre/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams 8080}}"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-handle", Labels: map[string]string{
		"caddy": keep, "caddy.handle": "/pre/*", "caddy.handle.0_reverse_proxy": "{{upstreams 8080}}"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-auth", Labels: map[string]string{
		"caddy": auth, "caddy.reverse_proxy": "{{upstreams 8080}}",
		"caddy.basic_auth.admin": "$2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-traefik", Labels: map[string]string{
		"traefik.enable":                                     "true",
		"traefik.http.routers.web.rule":                      "Host(`" + trf + "`) && PathPrefix(`/app`)",
		"traefik.http.routers.web.entrypoints":               "web",
		"traefik.http.services.web.loadbalancer.server.port": "8080"}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2f-mw", Labels: map[string]string{
		"traefik.enable":                                    "true",
		"traefik.http.routers.mw.rule":                      "Host(`" + mw + "`)",
		"traefik.http.routers.mw.middlewares":               "auth@file",
		"traefik.http.services.mw.loadbalancer.server.port": "8080"}})
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic docker {
			labels caddy-dicer caddy-docker-proxy traefik
			strip_path_prefix
		}
	}
}
:%d {
	reverse_proxy {
		dynamic docker {
			labels caddy-dicer caddy-docker-proxy traefik
		}
	}
}`, keep, httpPort, httpPort))

	servedAs := func(host, path string, status int, body string) {
		t.Helper()
		testkit.Eventually(t, waitFor, host+path+" answered "+body, func() bool {
			r, _ := getRetry(host, path, time.Second)
			return r.err == nil && r.status == status && (body == "" || r.body == body)
		})
	}
	servedAs(plain, "/", http.StatusOK, hello("r2f-cdp"))
	servedAs(strip, "/pre/healthz", http.StatusOK, "ok\n") // stripped, on a site without strip_path_prefix: the app's /healthz
	servedAs(strip, "/pre/x", http.StatusOK, hello("r2f-strip"))
	servedAs(keep, "/pre/healthz", http.StatusOK, hello("r2f-handle")) // kept, on a site with strip_path_prefix: not the app's /healthz
	servedAs(trf, "/app/healthz", http.StatusOK, hello("r2f-traefik")) // kept: not the app's /healthz
	// The refused ones: no route at all, whatever the path.
	for _, host := range []string{auth, mw} {
		for _, path := range []string{"/", "/app/x"} {
			mustGetPath(t, host, path, http.StatusServiceUnavailable)
		}
	}
	for name, label := range map[string]string{"r2f-auth": "caddy.basic_auth.admin", "r2f-mw": "traefik.http.routers.mw.middlewares"} {
		lines := testkit.LogLines(t, logFile, "(R2f)", dockertest.Name(name))
		if len(lines) != 1 {
			t.Errorf("%s: %d warnings, want 1: %q", name, len(lines), lines)
			continue
		}
		if !strings.Contains(lines[0], label) {
			t.Errorf("%s: the warning does not name %s: %s", name, label, lines[0])
		}
	}
	for _, set := range []string{"caddy-docker-proxy", "traefik"} { // one container of each refused, counted as warned
		if n := metric(t, "caddy_dicer_foreign_labels_refused_total", `kind="docker"`, `set="`+set+`"`); n < 1 {
			t.Errorf("caddy_dicer_foreign_labels_refused_total{set=%q} = %v, want at least 1", set, n)
		}
	}
	if lines := testkit.LogLines(t, logFile, "(R2f)", "$2a$14$"); len(lines) > 0 {
		t.Errorf("a warning shows the basic_auth hash: %s", lines[0])
	}
	for _, name := range []string{"r2f-cdp", "r2f-strip", "r2f-handle", "r2f-traefik"} {
		if lines := testkit.LogLines(t, logFile, "(R2f)", dockertest.Name(name)); len(lines) > 0 {
			t.Errorf("%s warned: %s", name, lines[0])
		}
	}
}

// mustGetPath asserts one answer of Caddy for host and path.
func mustGetPath(t *testing.T, host, path string, status int) {
	t.Helper()
	if r, _ := getRetry(host, path, 2*time.Second); r.err != nil || r.status != status {
		t.Errorf("%s%s: %v, want %d", host, path, r, status)
	}
}
