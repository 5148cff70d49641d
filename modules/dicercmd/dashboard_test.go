package dicercmd

// The dashboard (R13d) in a real browser: headless Chromium loads it from
// the admin endpoint and the test reads what a person would see.

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// serveDashboardCommand serves what `caddy dicer dashboard` serves, for
// the admin endpoint admin, on a free loopback port until t ends, and
// returns its URL, without the token, and the token.
func serveDashboardCommand(t *testing.T, admin string) (string, string) {
	t.Helper()
	handler, token, err := Dashboard(admin)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/", token
}

// R13d: `caddy dicer dashboard` serves the page, relays only the page's
// reads to the admin endpoint (with the admin endpoint's origin,
// as the other commands ask it), and answers only to a loopback Host.
func TestDashboardCommand_R13d_relays_the_page_reads_only(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path+" origin="+r.Header.Get("Origin"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[]`)
	}))
	defer admin.Close()
	base, token := serveDashboardCommand(t, strings.TrimPrefix(admin.URL, "http://"))
	get := func(path, host string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+strings.TrimPrefix(path, "/")+"?token="+token, nil)
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get("/", ""); code != http.StatusOK || !strings.Contains(body, "/dicer/instances") {
		t.Errorf("GET /: %d, the page? %.80q", code, body)
	}
	for _, uri := range dashboardReads {
		if code, body := get(uri, ""); code != http.StatusOK || body != "[]" {
			t.Errorf("GET %s: %d %q", uri, code, body)
		}
	}
	for _, uri := range []string{"/config/", "/load", "/dicer/weight", "/dicer/maintenance", "/metrics"} {
		if code, _ := get(uri, ""); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want it not relayed", uri, code)
		}
	}
	if code, _ := get("/dicer/instances", "evil.example:2020"); code != http.StatusForbidden {
		t.Errorf("a foreign Host: %d, want 403", code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "origin=" + admin.URL
	if len(asked) != len(dashboardReads) {
		t.Fatalf("the admin endpoint was asked %q, want the page's reads", asked)
	}
	for _, a := range asked {
		if !strings.HasPrefix(a, "GET /dicer/") || !strings.HasSuffix(a, want) {
			t.Errorf("the admin endpoint was asked %q, want GET /dicer/... with %s", a, want)
		}
	}
}

// R13d: `caddy dicer dashboard` does not widen who can read the admin
// endpoint: every request needs the printed URL's token (or the cookie the
// page's first answer sets), compared in constant time; a --listen address
// that is not loopback is refused unless --insecure-listen; serving an
// admin unix socket over TCP is warned of.
func TestDashboardCommand_R13d_needs_its_token(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[{"labels":{"secret":"x"}}]`)
	}))
	defer admin.Close()
	base, token := serveDashboardCommand(t, strings.TrimPrefix(admin.URL, "http://"))
	do := func(path string, cookie *http.Cookie) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, base+strings.TrimPrefix(path, "/"), nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	last := "A" // a token one character off
	if strings.HasSuffix(token, last) {
		last = "B"
	}
	for _, path := range []string{"/", "/dicer/instances", "/dicer/instances?token=", "/dicer/instances?token=" + token[:len(token)-1] + last, "/?token=wrong"} {
		if res := do(path, nil); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the right token: %d, want 401", path, res.StatusCode)
		}
	}
	if res := do("/dicer/instances", &http.Cookie{Name: dashboardTokenCookie, Value: "forged"}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d, want 401", res.StatusCode)
	}
	res := do("/?token="+token, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /?token=...: %d", res.StatusCode)
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == dashboardTokenCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("the page's answer sets no HttpOnly, SameSite=Strict token cookie: %v", res.Cookies())
	}
	if res := do("/dicer/instances", cookie); res.StatusCode != http.StatusOK {
		t.Errorf("the page's read with its cookie: %d, want 200", res.StatusCode)
	}

	for _, tc := range []struct {
		listen string
		force  bool
		ok     bool
	}{
		{"127.0.0.1:2020", false, true},
		{"[::1]:0", false, true},
		{"localhost:2020", false, true},
		{"0.0.0.0:2020", false, false},
		{"192.0.2.1:2020", false, false},
		{":2020", false, false},
		{"0.0.0.0:2020", true, true},
	} {
		err := checkDashboardListen(tc.listen, tc.force)
		if (err == nil) != tc.ok {
			t.Errorf("--listen %s (--insecure-listen %v): %v, want ok %v", tc.listen, tc.force, err, tc.ok)
		}
		var se *setting.Error
		if err != nil && (!errors.As(err, &se) || se.Setting != "--listen") {
			t.Errorf("--listen %s: %v does not name the setting --listen", tc.listen, err)
		}
	}
	sock, err := newAdminReader("unix//run/caddy-admin.sock")
	if err != nil || !sock.viaSocket {
		t.Errorf("a unix-socket admin: %v, viaSocket %v; want it known, to warn", err, sock != nil && sock.viaSocket)
	}
	if tcp, _ := newAdminReader("localhost:2019"); tcp == nil || tcp.viaSocket {
		t.Error("a TCP admin taken for a socket")
	}
}
