package testkit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("a condition that holds on the third check: not held")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds: held")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("gave up after %s, before the deadline", took)
	}
}

// hostEcho answers every request with its Host and path, and the header
// X-Seen.
func hostEcho(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", "yes")
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
		fmt.Fprintf(w, "%s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCaddyGet(t *testing.T) {
	srv := hostEcho(t)
	c := Caddy{Addr: srv.Listener.Addr().String()}
	r := c.Get(context.Background(), "shop.test", "/teapot")
	if !r.Is(http.StatusTeapot, "shop.test /teapot") || r.Header.Get("X-Seen") != "yes" || r.Took <= 0 {
		t.Errorf("got %s, header %v, took %s", r, r.Header, r.Took)
	}
	if r := c.GetWithin("blog.test", time.Second); !r.Is(http.StatusOK, "blog.test /") || r.Is(http.StatusOK, "other") {
		t.Errorf("got %s", r)
	}
	srv.Close()
	if r := c.GetWithin("shop.test", time.Second); r.Err == nil || !strings.HasPrefix(r.String(), "error: ") || r.Is(http.StatusOK, "") {
		t.Errorf("a closed listener: %s", r)
	}
}

func TestBurstKeepsOrderAndRunsAtOnce(t *testing.T) {
	var running, most atomic.Int32
	var next atomic.Int32
	got := Burst(20, func() int {
		i := next.Add(1)
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		return int(i)
	})
	if len(got) != 20 || slices.Sorted(slices.Values(got))[19] != 20 {
		t.Errorf("results %v", got)
	}
	if most.Load() < 2 {
		t.Errorf("at most %d calls at once", most.Load())
	}
}

func TestLoadCounts(t *testing.T) {
	var n atomic.Int32
	l := StartLoad(3, func() Result {
		if n.Add(1)%4 == 0 {
			return Result{Status: http.StatusBadGateway}
		}
		return Result{Status: http.StatusOK, Body: "a"}
	}, func(r Result) bool { return r.Is(http.StatusOK, "") })
	Eventually(t, 5*time.Second, "100 requests", func() bool { return l.Total() >= 100 })
	l.Stop()
	l.Stop()
	failed, failures := l.Failed()
	if l.Served("a")+failed != l.Total() || failed == 0 || len(failures) != min(failed, 10) || l.Bodies()["a"] != l.Served("a") {
		t.Errorf("served %d, failed %d (%q), total %d", l.Served("a"), failed, failures, l.Total())
	}
}

func TestLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "caddy.log")
	if ReadFile(t, path) != "" || LogLines(t, path, "x") != nil || LogEntries(path) != nil {
		t.Fatal("a log not yet written is not empty")
	}
	log := `{"msg":"instance joins rotation","instance":"web-1"}
not json
{"msg":"instance leaves rotation","instance":"web-1","why":"paused"}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := LogLines(t, path, `"instance":"web-1"`, "leaves"); len(got) != 1 || !strings.Contains(got[0], "paused") {
		t.Errorf("LogLines: %q", got)
	}
	if got := LogEntries(path); len(got) != 2 || got[1]["why"] != "paused" {
		t.Errorf("LogEntries: %v", got)
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Host)
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cert, err := Handshake(ctx, addr, "example.com", nil)
	if err != nil || !slices.Contains(cert.DNSNames, "example.com") {
		t.Fatalf("Handshake trusting any certificate: %v, %v", cert, err)
	}
	if _, err := Handshake(ctx, addr, "example.com", srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs); err != nil {
		t.Errorf("Handshake trusting the server's root: %v", err)
	}
	client := HTTPSClient(addr, nil, 5*time.Second)
	defer client.CloseIdleConnections()
	res, err := client.Get("https://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d", res.StatusCode)
	}
}

func TestAdminGet(t *testing.T) {
	srv := hostEcho(t)
	if got := AdminGet(t, srv.Listener.Addr().String(), "/config/"); !strings.HasSuffix(got, " /config/") {
		t.Errorf("AdminGet: %q", got)
	}
}
