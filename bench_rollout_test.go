package caddydicer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// BenchmarkRequestPath_R4f is BenchmarkRequestPath's request on a route
// with a selector, without a rollout (the route pays the check of
// s.rollout in record), and with one under way (its requests recorded
// and counted per instance at their end), side by side in one run.
func BenchmarkRequestPath_R4f(b *testing.B) {
	c := benchCatalog(1000)
	for _, mode := range []string{"no_rollout", "rolling"} {
		src := benchSource(connection.Fixture{Kind: "dicer", Address: "unix:///bench.sock", Catalog: c}.Conn())
		benchObserved(&src)
		if mode == "rolling" {
			src.rollout = &routeRollout{s: &src, name: "bench"}
			src.rollout.counting.Store(true)
		}
		w := benchWriter{http.Header{}}
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				repl := caddy.NewReplacer()
				ctx, cancel := context.WithCancel(context.Background())
				r := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil).WithContext(ctx)
				r = caddyhttp.PrepareRequest(r, repl, w, nil)
				ups, err := src.GetUpstreams(r)
				if err != nil || len(ups) == 0 {
					b.Fatal(err)
				}
				repl.Set("http.reverse_proxy.upstream.hostport", ups[0].Dial)
				repl.Set("http.reverse_proxy.status_code", 200)
				repl.Set("http.reverse_proxy.upstream.latency", 3*time.Millisecond)
				cancel()
			}
		})
	}
}
