package dockertest

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ReadOnlyProxy is an HTTP proxy to the Engine on a unix socket that
// refuses every write (any method but GET and HEAD) with 403, as a socket
// proxy configured read-only does (tecnativa/docker-socket-proxy with
// POST=0), and counts the writes it refused.
type ReadOnlyProxy struct {
	path    string
	refused atomic.Int64
}

// NewReadOnlyProxy starts a read-only proxy to the Engine at EngineHost
// (unix:// only), closed when the test ends.
func NewReadOnlyProxy(t testing.TB) *ReadOnlyProxy {
	t.Helper()
	target, err := url.Parse(EngineHost())
	if err != nil || target.Scheme != "unix" {
		t.Fatalf("dockertest: a read-only proxy needs a unix:// Engine, not %q", EngineHost())
	}
	dir, err := os.MkdirTemp("", "cdt")
	if err != nil {
		t.Fatal(err)
	}
	p := &ReadOnlyProxy{path: filepath.Join(dir, "ro.sock")}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	engine := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", target.Path)
		}},
		FlushInterval: -1, // the event stream
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				p.refused.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"message":"read-only socket: ` + r.Method + ` ` + r.URL.Path + ` is not allowed"}`))
				return
			}
			engine.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	})
	return p
}

// Host is the proxy's endpoint, for Caddy's address setting.
func (p *ReadOnlyProxy) Host() string { return "unix://" + p.path }

// Refused is the number of writes refused so far.
func (p *ReadOnlyProxy) Refused() int { return int(p.refused.Load()) }
