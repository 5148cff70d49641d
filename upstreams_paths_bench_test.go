package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// pathsCatalog is benchCatalog's n instances; with paths, the three of
// shop.example.com claim /api and every other instance claims two
// prefixes of its own, so that every host and wildcard has a trie (R2d).
func pathsCatalog(n int, paths bool) *catalog.Catalog {
	c := catalog.New(catalog.Options{})
	var all []catalog.Instance
	for i := range n {
		name, labels := fmt.Sprintf("other-%05d", i), map[string]string{"app": fmt.Sprintf("app-%d", i%50), "caddy.host": fmt.Sprintf("h%d.example.com", i)}
		if i%2 == 1 {
			labels["caddy.host"] = fmt.Sprintf("*.w%d.example.com", i)
		}
		if paths {
			labels["caddy.path"] = fmt.Sprintf("/p%d,/api/v%d", i, i%7)
		}
		if i < 3 {
			name, labels = "web-"+string(rune('a'+i)), map[string]string{"app": "web", "caddy.host": "shop.example.com"}
			if paths {
				labels["caddy.path"] = "/api"
			}
		}
		all = append(all, catalog.Instance{
			ID: name, Name: name, Labels: labels, State: catalog.StateRunning,
			Networks: []catalog.Attachment{{Network: "default", Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255+1)}},
			Ports:    []catalog.PublishedPort{{GuestPort: 8080, HostPort: uint16(20000 + i%40000)}},
		})
	}
	c.Replace(all)
	return c
}

// BenchmarkGetUpstreamsPaths is GetUpstreams for shop.example.com/api/v1/orders
// at 10 and 10k hosts, routed by host only (no instance has caddy.path)
// and by host and path (every instance has; the three of the host claim
// /api), in one run: compare paths/n=N with host_only/n=N (R2d; goal:
// within 1.3x). The request carries Caddy's original request, as in Caddy.
func BenchmarkGetUpstreamsPaths(b *testing.B) {
	for _, n := range []int{10, 10000} {
		for _, kind := range []string{"host_only", "paths"} {
			conn := connection.Fixture{Catalog: pathsCatalog(n, kind == "paths")}.Conn()
			u := &DicerUpstreams{upstreamSource: benchSource(conn)}
			req := httptest.NewRequest(http.MethodGet, "http://shop.example.com/api/v1/orders", nil)
			req = req.WithContext(context.WithValue(req.Context(), caddyhttp.OriginalRequestCtxKey, *req))
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					ups, _ := u.GetUpstreams(req)
					if len(ups) != 3 {
						b.Fatalf("got %d upstreams, want 3", len(ups))
					}
				}
			})
		}
	}
}

// BenchmarkGetUpstreamsPathsRatio is BenchmarkGetUpstreamsPaths with the
// two kinds of routing interleaved in batches of 16 requests, in turns,
// so that the load of a shared machine weighs on both alike: it reports
// the ns per call of each and their ratio, paths/host_only (R2d; goal:
// at most 1.3 at 10 and at 10k hosts).
func BenchmarkGetUpstreamsPathsRatio(b *testing.B) {
	const batch = 16
	for _, n := range []int{10, 10000} {
		var sources [2]*DicerUpstreams // host only, paths
		for i := range sources {
			sources[i] = &DicerUpstreams{upstreamSource: benchSource(connection.Fixture{Catalog: pathsCatalog(n, i == 1)}.Conn())}
		}
		req := httptest.NewRequest(http.MethodGet, "http://shop.example.com/api/v1/orders", nil)
		req = req.WithContext(context.WithValue(req.Context(), caddyhttp.OriginalRequestCtxKey, *req))
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var spent [2]time.Duration
			calls := 0
			for b.Loop() {
				for turn := range 2 {
					kind := (calls/batch + turn) % 2 // who goes first alternates
					began := time.Now()
					for range batch {
						if ups, _ := sources[kind].GetUpstreams(req); len(ups) != 3 {
							b.Fatalf("got %d upstreams, want 3", len(ups))
						}
					}
					spent[kind] += time.Since(began)
				}
				calls += batch
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(calls), "host_only-ns/call")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(calls), "paths-ns/call")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "paths/host_only")
			b.ReportMetric(0, "ns/op") // a batch of each: see the metrics above
		})
	}
}
