package caddydicer

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// keptAlive is a loopback HTTP server that counts the connections opened
// to it, and Caddy's HTTP transport, provisioned, sending to it.
type keptAlive struct {
	srv    *httptest.Server
	opened atomic.Int32
	rt     *reverseproxy.HTTPTransport
}

func newKeptAlive(t *testing.T) *keptAlive {
	t.Helper()
	k := &keptAlive{}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	k.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			k.opened.Add(1)
		}
	}
	k.srv.Start()
	t.Cleanup(k.srv.Close)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	k.rt = new(reverseproxy.HTTPTransport)
	if err := k.rt.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.rt.Cleanup() })
	return k
}

// get sends one request through the transport's pool and returns how many
// connections the server has seen opened so far.
func (k *keptAlive) get(t *testing.T) int32 {
	t.Helper()
	res, err := (&http.Client{Transport: k.rt.Transport}).Get(k.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return k.opened.Load()
}

// R5a: when the catalog of a daemon sees one of its instances freeze, the
// idle connections of the transport of every route on that daemon are
// closed, so the next request opens a new one; otherwise keep-alive works
// as usual. A route removed from the connection is left alone.
func TestR5a_a_freeze_closes_the_idle_connections_of_the_routes(t *testing.T) {
	k := newKeptAlive(t)
	spec := newConnSpec("r5a-test", t.Name(), "", "", nil, func(ctx context.Context, _ catalog.Sink, _ *zap.Logger) { <-ctx.Done() })
	spec.key = spec.connKey() // as resolve keys it: released at the end
	conn, err := dicerapp.Dial(spec.key, spec.conn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dicerapp.Release(spec.key) })
	s := &upstreamSource{conn: conn, keepAlive: &keepAlive{handler: &reverseproxy.Handler{Transport: k.rt}}}
	conn.AddRoute(s, "caddy.host")

	sleepy := catalog.Instance{ID: "id-sleepy", Name: "sleepy", State: catalog.StateRunning,
		Labels:   map[string]string{catalog.LabelHost: "sleepy.test"},
		Networks: []catalog.Attachment{{Network: "net0", Address: "10.0.0.2"}}}
	conn.Catalog().Replace([]catalog.Instance{sleepy})
	s.keepAlive.resolve() // as the first request through the handler does
	if k.get(t) != 1 || k.get(t) != 1 {
		t.Fatalf("keep-alive: %d connections for two requests, want 1", k.opened.Load())
	}
	sleepy.State = catalog.StatePaused
	conn.Catalog().Put(sleepy)
	if n := k.get(t); n != 2 {
		t.Fatalf("after a freeze: %d connections opened, want 2 (a new one)", n)
	}
	sleepy.State = catalog.StateRunning
	conn.Catalog().Put(sleepy)
	if n := k.get(t); n != 2 {
		t.Fatalf("after an unpause, no freeze: %d connections opened, want 2 (the same)", n)
	}
	conn.RemoveRoute(s)
	sleepy.State = catalog.StatePaused
	conn.Catalog().Put(sleepy)
	if n := k.get(t); n != 2 {
		t.Fatalf("a freeze after the route left: %d connections opened, want 2 (left alone)", n)
	}
}

// R5a: a request that picks an instance on standby, to wake it by a
// connection (R5.2), closes its handler's idle connections before it
// dials: one that was busy at the freeze may have come back to the pool
// since.
func TestR5a_a_request_that_wakes_closes_the_idle_connections(t *testing.T) {
	k := newKeptAlive(t)
	spec := newConnSpec("r5a-test", t.Name(), "", "", nil, func(ctx context.Context, _ catalog.Sink, _ *zap.Logger) { <-ctx.Done() })
	spec.key = spec.connKey() // as resolve keys it: released at the end
	conn, err := dicerapp.Dial(spec.key, spec.conn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dicerapp.Release(spec.key) })
	s := &upstreamSource{conn: conn, route: catalog.Route{Port: 8080},
		keepAlive: &keepAlive{handler: &reverseproxy.Handler{Transport: k.rt}}}
	conn.Catalog().Replace([]catalog.Instance{{ID: "id-sleepy", Name: "sleepy", State: catalog.StateStandby, WakeOnConnect: true,
		Labels:   map[string]string{catalog.LabelHost: "sleepy.test"},
		Networks: []catalog.Attachment{{Network: "net0", Address: "10.0.0.2", Gateway: "10.0.0.1"}},
		Ports:    []catalog.PublishedPort{{HostPort: 32768, GuestPort: 8080, Protocol: catalog.TCP}}}})
	r := httptest.NewRequest(http.MethodGet, "http://sleepy.test/", nil)
	if ups, err := s.GetUpstreams(r); err != nil || len(ups) != 1 || ups[0].Dial != "10.0.0.1:32768" {
		t.Fatalf("GetUpstreams: %v, %v; want the published port 10.0.0.1:32768, as it is", ups, err)
	}
	if k.get(t) != 1 || k.get(t) != 1 {
		t.Fatalf("keep-alive: %d connections for two requests, want 1", k.opened.Load())
	}
	if _, err := s.GetUpstreams(r); err != nil {
		t.Fatal(err)
	}
	if n := k.get(t); n != 2 {
		t.Fatalf("after a request that wakes: %d connections opened, want 2 (a new one)", n)
	}
}
