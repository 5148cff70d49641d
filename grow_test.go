package caddydicer

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
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
		key := ""
		if c.labelled {
			key = catalog.LabelSoftLimit
		}
		cat := shopOfThree(key, "10")
		g := connectwake.New(context.Background(), connectwake.Options{})
		conn := connection.Fixture{Catalog: cat, Grower: g}.Conn()
		u := &DicerUpstreams{upstreamSource: upstreamSource{conn: conn, route: catalog.Route{Port: 8080}, keepAlive: &keepAlive{}}}
		benchShopUpstreams(b, c.name, &u.upstreamSource, u.GetUpstreams, c.inFlight)
		g.Close()
	}
}

// R5j on a Dicer-like connection, without Caddy: GetUpstreams of a route
// whose one routable instance is past its caddy.soft_limit answers with
// it, and the connection's Grower connects once to the published port of
// the instance on standby (a listener of the test), however many requests
// see the pool loaded.
func TestDicer_R5j_GetUpstreams_grows_by_connecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	labels := map[string]string{"caddy.host": "h", "caddy.port": "8080", catalog.LabelSoftLimit: "2"}
	net0 := []catalog.Attachment{{Network: "n", Address: "10.0.0.2", Gateway: "127.0.0.1"}}
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{
		{ID: "a", Name: "a", Labels: labels, State: catalog.StateRunning, Networks: net0},
		{ID: "b", Name: "b", Labels: labels, State: catalog.StateStandby, WakeOnConnect: true, Networks: net0,
			Ports: []catalog.PublishedPort{{HostPort: uint16(port), GuestPort: 8080, Protocol: catalog.TCP}}},
	})
	g := connectwake.New(context.Background(), connectwake.Options{})
	defer g.Close()
	u := &DicerUpstreams{upstreamSource: upstreamSource{conn: connection.Fixture{Catalog: cat, Grower: g}.Conn(), keepAlive: &keepAlive{}}}
	for _, tg := range cat.Snapshot().Targets(nil, u.route, "h") {
		tg.Activity.Begin().Learn(tg.Dial, fixedInFlight(3))
	}
	for range 20 {
		ups, err := u.GetUpstreams(httptest.NewRequest(http.MethodGet, "http://h/", nil))
		if err != nil || len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" {
			t.Fatalf("upstreams %v, %v; want a alone", ups, err)
		}
	}
	if !testkit.Until(5*time.Second, func() bool { return accepted.Load() > 0 }) {
		t.Fatal("no connection to b's published port")
	}
	g.Close() // the Grower's connections are through
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections to b's published port for 20 loaded requests, want 1", n)
	}
}
