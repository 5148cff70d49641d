package caddydicer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// R4e: a Caddy that restarts serves its first request with the weights
// set through another Caddy of its fleet: a weight of 0 on web-2, set
// through Caddy A, is on web-2's upstream in the first request's targets
// of Caddy B (a new connection to the same daemon, the same storage
// folder) right after B's config load, not a second later. The storage is
// Caddy's file_system, read through its Stat.
func TestLoad_R4e_a_restarted_Caddy_serves_its_first_request_with_the_fleets_weights(t *testing.T) {
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.121", map[string]string{"app": "web"})
	d.HelloInstance(t, "web-2", "127.0.0.122", map[string]string{"app": "web"})
	raw, _ := json.Marshal(map[string]string{"module": "file_system", "root": t.TempDir()})
	settings := DicerDaemon{Address: "unix:" + sock}
	start := func() (*DicerUpstreams, context.CancelFunc) {
		t.Helper()
		base, err := caddy.ProvisionContext(&caddy.Config{StorageRaw: raw})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := caddy.NewContext(base)
		u := &DicerUpstreams{DicerDaemon: settings, upstreamSource: upstreamSource{Selector: "app=web"}}
		if err := u.Provision(ctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		return u, func() { _ = u.Cleanup(); cancel() }
	}

	a, stopA := start()
	if _, _, err := a.conn.SetWeight(func(_ map[string]string, name string) bool { return name == "web-2" }, 0); err != nil {
		t.Fatal(err)
	}
	stopA()
	spec, err := resolve(&settings)
	if err != nil {
		t.Fatal(err)
	}
	if n := dicerapp.References(spec.key); n != 0 {
		t.Fatalf("A's connection still has %d users: B would not be a new one", n)
	}

	for round := range 3 { // B, restarted three times
		b, stopB := start()
		req := httptest.NewRequest(http.MethodGet, "http://web.test/", nil)
		req = req.WithContext(context.WithValue(req.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		if ups, err := b.GetUpstreams(req); err != nil || len(ups) != 2 {
			stopB()
			t.Fatalf("round %d: the first request's upstreams: %v %v", round+1, ups, err)
		}
		weights := map[string]int{}
		for _, tg := range b.conn.Catalog().Snapshot().Targets(nil, b.route, "web.test") {
			weights[tg.Instance] = tg.Weight
		}
		stopB()
		if weights["web-2"] != 0 || weights["web-1"] != catalog.DefaultWeight {
			t.Fatalf("round %d: right after the load, the first request's weights are %v, want web-2 at the fleet's 0", round+1, weights)
		}
	}
}
