package dockertest

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"
)

// FilterRule allows requests whose method is one of Methods and whose path
// (without the query) matches Path.
type FilterRule struct {
	Methods []string
	Path    *regexp.Regexp
}

// FilterProxy is an HTTP proxy to the Engine on a unix socket that
// forwards only the requests a rule allows and answers every other one 403,
// as a filtering socket proxy does; it records what it refused.
type FilterProxy struct {
	path    string
	rules   []FilterRule
	mu      sync.Mutex
	refused []string // "METHOD /path"
}

// NewFilterProxy starts a filtering proxy to the Engine at EngineHost
// (unix:// only), closed when the test ends.
func NewFilterProxy(t testing.TB, rules ...FilterRule) *FilterProxy {
	t.Helper()
	target, err := url.Parse(EngineHost())
	if err != nil || target.Scheme != "unix" {
		t.Fatalf("dockertest: a filtering proxy needs a unix:// Engine, not %q", EngineHost())
	}
	dir, err := os.MkdirTemp("", "cdt")
	if err != nil {
		t.Fatal(err)
	}
	p := &FilterProxy{path: filepath.Join(dir, "f.sock"), rules: rules}
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
			if !p.Allows(r.Method, r.URL.Path) {
				p.mu.Lock()
				p.refused = append(p.refused, r.Method+" "+r.URL.Path)
				p.mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"message":"filtering proxy: this request is not allowed"}`))
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

// Allows reports whether a rule allows method on path.
func (p *FilterProxy) Allows(method, path string) bool {
	for _, r := range p.rules {
		if slices.Contains(r.Methods, method) && r.Path.MatchString(path) {
			return true
		}
	}
	return false
}

// Host is the proxy's endpoint.
func (p *FilterProxy) Host() string { return "unix://" + p.path }

// Refused is what the proxy refused so far, each as "METHOD /path".
func (p *FilterProxy) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refused)
}
