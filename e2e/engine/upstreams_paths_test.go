package engine

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// echoInstance starts a server on ip that answers "<name> <path it got>"
// and creates a running instance there, whose caddy.port label names its
// port.
func echoInstance(t *testing.T, d *dicertest.Daemon, name, ip string, labels map[string]string) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, name+" "+r.URL.Path)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	l := map[string]string{"caddy.port": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	for k, v := range labels {
		l[k] = v
	}
	d.CreateInstance(&dicerpb.Instance{Name: name, Ip: ip, NetworkName: "default", Labels: l,
		State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING})
}

// pathSite routes by caddy.host on the daemon at sock, with the matched
// path prefix stripped before reverse_proxy.
func pathSite(sock string) string {
	return fmt.Sprintf(`
:%d {
	dicer_path_prefix dicer {
		address unix:%[2]s
	}
	uri strip_prefix {dicer.path_prefix}
	reverse_proxy {
		dynamic dicer {
			address unix:%[2]s
		}
	}
}`, httpPort, sock)
}

// TestCaddy_R2d_path_prefixes routes, through Caddy, requests for three
// instances at /, /api and /api/v2 (and a wildcard host, and a host
// without paths): the longest prefix on segment boundaries, as Caddy's
// path matcher reads the path (case, escapes, `..`, doubled slashes), and
// `uri strip_prefix {dicer.path_prefix}` strips the prefix matched
// without changing where the request goes.
func TestCaddy_R2d_path_prefixes(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	echoInstance(t, d, "root", "127.0.0.211", map[string]string{"caddy.host": "a.test, *.w.test"})
	echoInstance(t, d, "api", "127.0.0.212", map[string]string{"caddy.host": "a.test, *.w.test", "caddy.path": "/api"})
	echoInstance(t, d, "v2", "127.0.0.213", map[string]string{"caddy.host": "a.test", "caddy.path": "/api/v2/"})
	echoInstance(t, d, "other", "127.0.0.214", map[string]string{"caddy.host": "b.test"})
	tester, _ := startCaddy(t, "", pathSite(sock))
	c := caddyAt(tester)
	eventually(t, "a.test/api answered by api", func() bool {
		r := c.Get(context.Background(), "a.test", "/api/x")
		return r.Err == nil && r.Body == "api /x"
	})
	for _, tc := range []struct{ host, path, want string }{
		{"a.test", "/", "root /"},
		{"a.test", "/index.html", "root /index.html"},
		{"a.test", "/api", "api /"},
		{"a.test", "/api/", "api /"},
		{"a.test", "/api/x", "api /x"},
		{"a.test", "/apix", "root /apix"},
		{"a.test", "/API/x", "api /x"},
		{"a.test", "/Api/V2", "v2 /"},
		{"a.test", "/api/v2", "v2 /"},
		{"a.test", "/api/v2/", "v2 /"},
		{"a.test", "/api/v2/users", "v2 /users"},
		{"a.test", "/api/v20", "api /v20"},
		{"a.test", "/api/v2x", "api /v2x"},
		{"a.test", "/api/v2/../v3", "api /v3"},
		{"a.test", "/api/../admin", "root /admin"},
		{"a.test", "/api/%2e%2e/admin", "root /admin"},
		{"a.test", "/admin/../api/v2/x", "v2 /x"},
		{"a.test", "/../../api", "api /"},
		{"a.test", "//api//v2", "v2 /"},
		{"a.test", "/api/./v2/.", "v2 /"},
		{"a.test", "/%61pi/x", "api /x"},
		{"a.test", "/%41PI/V2/y", "v2 /y"},
		{"a.test", "/api%2Fv2/z", "v2 /z"},
		{"a.test", "/api;v2", "root /api;v2"},
		{"a.test", "/api?x=/api/v2", "api /"},
		{"x.w.test", "/", "root /"},
		{"x.w.test", "/api", "api /"},
		{"x.w.test", "/api/v2", "api /v2"},
		{"x.w.test", "/apiv2", "root /apiv2"},
		{"b.test", "/api", "other /api"},
		{"b.test", "/", "other /"},
		{"c.test", "/api", "503"},
		{"a.w.test.", "/api", "503"},
	} {
		r := c.Get(context.Background(), tc.host, tc.path)
		got := strings.TrimSpace(r.Body)
		if r.Status != http.StatusOK {
			got = strconv.Itoa(r.Status)
		}
		if r.Err != nil || got != tc.want {
			t.Errorf("%s%s: got %q (%v), want %q", tc.host, tc.path, got, r.Err, tc.want)
		}
	}
}

// TestCaddy_R2d_strip_path_prefix_keeps_path_scoped_auth: with the
// source's strip_path_prefix, a path-scoped basic_auth of the site still
// sees the client's path: /admin/x without credentials is 401 (with the
// old recipe, `uri strip_prefix` at the top of the site, it was 200), with
// them it reaches the /admin instance as /x; a retry-free request to the
// root instance keeps its path.
func TestCaddy_R2d_strip_path_prefix_keeps_path_scoped_auth(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	echoInstance(t, d, "root", "127.0.0.215", map[string]string{"caddy.host": "p.test"})
	echoInstance(t, d, "admin", "127.0.0.216", map[string]string{"caddy.host": "p.test", "caddy.path": "/admin"})
	// Password "secret", bcrypt of cost 4 (caddy hash-password --cost 4 would do).
	site := fmt.Sprintf(`
:%d {
	basic_auth /admin/* {
		alice $2a$04$5NL0OLhMQZNBD.fayboQqODBfy5bF/pIlUFruVcmpQyvbQmziRfse
	}
	reverse_proxy {
		dynamic dicer {
			address unix:%s
			strip_path_prefix
		}
	}
}`, httpPort, sock)
	tester, _ := startCaddy(t, "", site)
	c := caddyAt(tester)
	eventually(t, "p.test/ answered by root", func() bool {
		r := c.Get(context.Background(), "p.test", "/index.html")
		return r.Err == nil && r.Body == "root /index.html"
	})
	if r := c.Get(context.Background(), "p.test", "/admin/x"); r.Status != http.StatusUnauthorized {
		t.Errorf("/admin/x without credentials: %d %q, want 401", r.Status, r.Body)
	}
	if r := c.Get(context.Background(), "p.test", "/ADMIN/x"); r.Status != http.StatusUnauthorized {
		t.Errorf("/ADMIN/x without credentials: %d %q, want 401", r.Status, r.Body)
	}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/admin/x?q=1", httpPort), nil)
	req.Host = "p.test"
	req.SetBasicAuth("alice", "secret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "admin /x" {
		t.Errorf("/admin/x with credentials: %d %q, want 200 \"admin /x\"", res.StatusCode, body)
	}
}
