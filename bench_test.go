package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// benchCatalog holds n instances of which exactly three (web-a..web-c, app=web,
// host shop.example.com) serve the benchmarked route, so a request's cost can
// be compared across catalog sizes. Half the others claim a wildcard
// (*.wN.example.com), the rest an exact name (hN.example.com).
func benchCatalog(n int) *catalog.Catalog {
	c := catalog.New(catalog.Options{})
	var all []catalog.Instance
	for i := range n {
		name, labels := fmt.Sprintf("other-%05d", i), map[string]string{"app": fmt.Sprintf("app-%d", i%50), "caddy.host": fmt.Sprintf("h%d.example.com", i)}
		if i%2 == 1 {
			labels["caddy.host"] = fmt.Sprintf("*.w%d.example.com", i)
		}
		if i < 3 {
			name, labels = "web-"+string(rune('a'+i)), map[string]string{"app": "web", "caddy.host": "shop.example.com"}
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

// benchSource is a route on port 8080 of conn, its counters resolved as
// provision resolves them.
func benchSource(conn *connection.Conn) upstreamSource {
	return upstreamSource{conn: conn, route: catalog.Route{Port: 8080},
		noUpstream: conn.NoUpstream("bench"), wakes: conn.Wakes(connection.WakeRequested),
		keepAlive: &keepAlive{}}
}

func BenchmarkGetUpstreams(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		c := benchCatalog(n)
		conn := connection.Fixture{Catalog: c}.Conn()
		for _, route := range []struct {
			name string
			sel  string
		}{{"by_host", ""}, {"by_selector", "app=web"}} {
			u := &DicerUpstreams{upstreamSource: benchSource(conn)}
			if route.sel != "" {
				u.route.View = c.Watch(selector.MustParse(route.sel))
			}
			req := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil)
			b.Run(fmt.Sprintf("%s/n=%d", route.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					ups, _ := u.GetUpstreams(req)
					if len(ups) != 3 {
						b.Fatalf("got %d upstreams, want 3", len(ups))
					}
				}
			})
		}
		// Two sites reaching the same instances on different ports, taking
		// turns: each keeps its dial addresses (dialmemo.go).
		sites := [2]*DicerUpstreams{{upstreamSource: benchSource(conn)}, {upstreamSource: benchSource(conn)}}
		sites[1].route.Port = 9090
		shop := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil)
		b.Run(fmt.Sprintf("two_ports/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ups, _ := sites[i&1].GetUpstreams(shop)
				if len(ups) != 3 {
					b.Fatalf("got %d upstreams, want 3", len(ups))
				}
			}
		})
		// R2a: a name only a wildcard claims, one index lookup away.
		u := &DicerUpstreams{upstreamSource: benchSource(conn)}
		req := httptest.NewRequest(http.MethodGet, "http://tenant.w5.example.com/", nil)
		b.Run(fmt.Sprintf("by_wildcard/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ups, _ := u.GetUpstreams(req)
				if len(ups) != 1 {
					b.Fatalf("got %d upstreams, want 1", len(ups))
				}
			}
		})
	}
}

// BenchmarkCertificateAllowed is the on-demand TLS permission (R7, R7a):
// a claimed name, a scanner's name nobody claims, a name only a wildcard
// claims (allowed with `wildcards allow`, refused without), and a name
// outside allow_suffix. Refusals must cost no allocation.
func BenchmarkCertificateAllowed(b *testing.B) {
	for _, n := range []int{10, 10000} {
		c := benchCatalog(n)
		conn := connection.Fixture{Kind: "dicer", Address: "unix:///bench.sock", Catalog: c}.Conn()
		p := &DicerPermission{hostPermission: hostPermission{conn: conn, logger: zap.NewNop(), decisions: conn.Decisions()}}
		ctx := context.Background()
		b.Run(fmt.Sprintf("allowed/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.CertificateAllowed(ctx, "shop.example.com"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("denied/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.CertificateAllowed(ctx, "scanner.example.net"); err == nil {
					b.Fatal("allowed an unclaimed host")
				}
			}
		})
		b.Run(fmt.Sprintf("wildcard_refused/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.CertificateAllowed(ctx, "tenant.w5.example.com"); err == nil {
					b.Fatal("allowed a wildcard name without wildcards allow")
				}
			}
		})
		wild := &DicerPermission{hostPermission: hostPermission{conn: conn, logger: zap.NewNop(), decisions: conn.Decisions(),
			Wildcards: "allow", AllowSuffix: []string{"example.com"}, Selector: "app"}}
		if err := wild.settle(); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("wildcard_allowed/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := wild.CertificateAllowed(ctx, "tenant.w5.example.com"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("denied_by_allow_suffix/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := wild.CertificateAllowed(ctx, "scanner.example.net"); err == nil {
					b.Fatal("allowed a name outside allow_suffix")
				}
			}
		})
	}
}
