package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// caddyRequest is a request for host as Caddy's HTTP server hands it to a
// handler: with a replacer and the request variables; cancel ends it.
func caddyRequest(host string) (*http.Request, *caddy.Replacer, context.CancelFunc) {
	repl := caddy.NewReplacer()
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	r := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil).WithContext(ctx)
	return r, repl, cancel
}

// R13a: the placeholders name the instance of the upstream reverse_proxy
// selected, among what this request's GetUpstreams returned: before a
// selection they are empty, a retry's new answer replaces the old, and a
// label's value is bounded and has no control characters. R13b: the
// request counts against that instance when it ends, and a retry counts
// the failed attempt.
func TestPlaceholders_R13a_name_the_selected_instance(t *testing.T) {
	c := benchCatalog(10) // web-a, web-b, web-c serve shop.example.com at 10.0.0.1-3
	conn := connection.Fixture{Kind: "dicer", Address: "unix:///t.sock", Catalog: c}.Conn()
	src := benchSource(conn)
	src.observed = sourceObserved{conn: conn, route: "caddy.host port 8080"}
	src.countsInstances = true // Caddy's metrics on (R13b)
	r, repl, cancel := caddyRequest("shop.example.com")
	ups, err := src.GetUpstreams(r)
	if err != nil || len(ups) != 3 {
		t.Fatalf("GetUpstreams: %v, %d upstreams", err, len(ups))
	}
	if got := repl.ReplaceAll("[{dicer.upstream.name}]", ""); got != "[]" {
		t.Errorf("before a selection: %q", got)
	}
	repl.Set("http.reverse_proxy.upstream.hostport", ups[1].Dial) // reverse_proxy selected the second
	for in, want := range map[string]string{
		"{dicer.upstream.name}":      "web-b",
		"{dicer.upstream.id}":        "web-b",
		"{dicer.upstream.kind}":      "dicer",
		"{dicer.upstream.daemon}":    "unix:///t.sock",
		"{dicer.upstream.route}":     "caddy.host port 8080",
		"{dicer.upstream.label.app}": "web",
		"{dicer.upstream.label.no}":  "",
		"{dicer.upstream.other}":     "{dicer.upstream.other}",
	} {
		if got := repl.ReplaceKnown(in, ""); got != want {
			t.Errorf("%s = %q, want %q", in, got, want)
		}
	}
	// A retry: the attempt at web-b failed; the new answer is the one
	// looked up, and web-a is selected.
	ups, _ = src.GetUpstreams(r)
	repl.Set("http.reverse_proxy.upstream.hostport", ups[0].Dial)
	repl.Set("http.reverse_proxy.status_code", 200)
	repl.Set("http.reverse_proxy.upstream.latency", 3*time.Millisecond)
	if got := repl.ReplaceAll("{dicer.upstream.name}", ""); got != "web-a" {
		t.Errorf("after a retry: %q", got)
	}
	if v := fmt.Sprint(caddyhttp.GetVar(r.Context(), servedVar)); v != "web-a" {
		t.Errorf("{http.vars.%s} = %v", servedVar, v)
	}
	cancel()
	a, b := src.observed.stats("web-a"), src.observed.stats("web-b")
	if !testkit.Until(5*time.Second, func() bool { instanceSeries.sweep(); return a.requests.Load() == 1 }) {
		t.Fatal("the request was not counted at web-a")
	}
	if a.errors.Load() != 0 || a.count.Load() != 1 || b.requests.Load() != 1 || b.errors.Load() != 1 {
		t.Errorf("web-a %d requests %d errors %d latencies; web-b %d requests %d errors",
			a.requests.Load(), a.errors.Load(), a.count.Load(), b.requests.Load(), b.errors.Load())
	}
}

func TestPrintable_R13a_bounded_without_control_characters(t *testing.T) {
	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'a'
	}
	long[3] = '\n'
	got := printable(string(long))
	if len(got) != maxPlaceholderValue || got[3] != '?' {
		t.Errorf("printable: %d bytes, %q", len(got), got[:8])
	}
	if printable("web-1") != "web-1" {
		t.Error("a clean value changed")
	}
}

// benchObserved labels a benchmark's source's series, as provision does
// (BenchmarkRequestPath).
func benchObserved(s *upstreamSource) {
	s.observed = sourceObserved{conn: s.conn, route: "bench"}
}

// The record of who served a request stays within 512 bytes, the largest
// object with pointers Go allocates without a header of its own: more
// inline upstreams would cost every request more (docs/benchmarks.md).
func TestServedRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(served{}); n > 512 {
		t.Errorf("the record is %d bytes, more than 512", n)
	}
}
