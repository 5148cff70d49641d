package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
)

// BenchmarkGetUpstreamsSoftLimit is GetUpstreams for a route of three
// running instances, labelled caddy.soft_limit=10 or not, on a Dicer-like
// connection (a connectwake.Grower, no scale to zero by Caddy), none past
// its limit: the price of counting requests in flight (R5j), once
// reverse_proxy's in-flight counters are known; loaded: every one past it
// and none on standby, so that each request takes the Grower's lock and
// finds nothing to wake.
func BenchmarkGetUpstreamsSoftLimit(b *testing.B) {
	for _, c := range []struct {
		name     string
		labelled bool
		inFlight int
	}{{"labelled=false", false, 1}, {"labelled=true", true, 1}, {"loaded", true, 20}} {
		labelled := c.labelled
		cat := catalog.New(catalog.Options{})
		var all []catalog.Instance
		for i := range 3 {
			labels := map[string]string{"caddy.host": "shop.example.com"}
			if labelled {
				labels[catalog.LabelSoftLimit] = "10"
			}
			all = append(all, catalog.Instance{ID: fmt.Sprint(i), Name: fmt.Sprint("web-", i), Labels: labels, State: catalog.StateRunning,
				Networks: []catalog.Attachment{{Network: "n", Address: fmt.Sprintf("10.0.0.%d", i+2)}}})
		}
		cat.Replace(all)
		g := connectwake.New(context.Background(), connectwake.Options{})
		conn := &connection{catalog: cat, grower: g}
		u := &DicerUpstreams{upstreamSource: upstreamSource{conn: conn, route: catalog.Route{Port: 8080}, keepAlive: &keepAlive{}}}
		for _, t := range cat.Snapshot().Targets(nil, u.route, "shop.example.com") {
			if t.Activity != nil {
				t.Activity.Begin()
				t.Activity.Learn(t.Dial, fixedInFlight(c.inFlight))
			}
		}
		req := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ups, _ := u.GetUpstreams(req); len(ups) != 3 {
					b.Fatalf("got %d upstreams, want 3", len(ups))
				}
			}
		})
		g.Close()
	}
}
