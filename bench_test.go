package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// benchCatalog holds n instances of which exactly three (web-a..web-c, app=web,
// host shop.example.com) serve the benchmarked route, so a request's cost can
// be compared across catalog sizes.
func benchCatalog(n int) *catalog.Catalog {
	c := catalog.New(catalog.Options{})
	var all []catalog.Instance
	for i := range n {
		name, labels := fmt.Sprintf("other-%05d", i), map[string]string{"app": fmt.Sprintf("app-%d", i%50), "caddy.host": fmt.Sprintf("h%d.example.com", i)}
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

func BenchmarkGetUpstreams(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		c := benchCatalog(n)
		conn := &connection{catalog: c}
		for _, route := range []struct {
			name string
			sel  string
		}{{"by_host", ""}, {"by_selector", "app=web"}} {
			u := &DicerUpstreams{upstreamSource: upstreamSource{conn: conn, route: catalog.Route{Port: 8080}}}
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
	}
}

func BenchmarkCertificateAllowed(b *testing.B) {
	for _, n := range []int{10, 10000} {
		p := &DicerPermission{hostPermission: hostPermission{conn: &connection{catalog: benchCatalog(n)}}}
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
	}
}
