package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// R1a, R1b: the instances a route makes relevant are probed from its
// Watch, and a later route of the same connection (its selector matching
// instances no earlier route watched, with no caddy.* label) is ready when
// its config load ends, as the first route's instances are: its first
// request is served, not answered 503 while the first probe runs. (The
// e2e run saw this as a 503 on the first request to the second site.)
func TestLoad_R1b_a_later_routes_instances_are_probed_before_the_load_ends(t *testing.T) {
	for round := range 5 {
		d, sock := dicertest.OnSocket(t)
		ports := map[string]int{}
		for _, app := range []string{"web", "api"} {
			ip := fmt.Sprintf("127.0.0.%d", 160+2*round+len(app)%2)
			ports[app] = dicertest.HelloPort(t, ip, app+"-1")
			d.CreateInstance(&dicerpb.Instance{Name: app + "-1", Ip: ip, NetworkName: "default",
				Labels: map[string]string{"app": app},
				State:  dicerpb.InstanceState_INSTANCE_STATE_RUNNING})
		}
		ctx, cancel := newLoad(t)
		var api reverseproxy.UpstreamSource
		for _, app := range []string{"web", "api"} {
			mod, err := ctx.LoadModuleByID("http.reverse_proxy.upstreams.dicer", []byte(fmt.Sprintf(
				`{"selector": "app=%s", "port": %d, "address": "unix:%s"}`, app, ports[app], sock)))
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			api = mod.(reverseproxy.UpstreamSource)
		}
		req := httptest.NewRequest(http.MethodGet, "http://api.test/", nil)
		req = req.WithContext(context.WithValue(req.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		ups, err := api.GetUpstreams(req)
		cancel()
		if err != nil || len(ups) != 1 {
			t.Fatalf("round %d: right after the load, the second route has upstreams %v (%v), want api-1's", round+1, ups, err)
		}
	}
}
