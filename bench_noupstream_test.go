package caddydicer

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// BenchmarkGetUpstreamsNoUpstream is a request for a host no instance
// claims, answered 503: the case the no_upstream counter counts.
func BenchmarkGetUpstreamsNoUpstream(b *testing.B) {
	for _, n := range []int{10, 10000} {
		u := &DicerUpstreams{upstreamSource: benchSource(connection.Fixture{Catalog: benchCatalog(n)}.Conn())}
		req := httptest.NewRequest(http.MethodGet, "http://nobody.example.net/", nil)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ups, _ := u.GetUpstreams(req); len(ups) != 0 {
					b.Fatalf("got %d upstreams, want none", len(ups))
				}
			}
		})
	}
}
