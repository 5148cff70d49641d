package caddydicer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
)

// ignoringSource is a Docker route on port 8080 over the container a,
// labelled caddy.standby_ignore=ignore, in state, with its page server and
// a standby.Waker whose writes f counts.
func ignoringSource(t *testing.T, f *fakeActions, state catalog.State, ignore string) (*upstreamSource, *catalog.Catalog) {
	t.Helper()
	w, cat := newTestStandby(t, f)
	in := sleeper(state)
	in.Labels[catalog.LabelStandbyIgnore] = ignore
	cat.Replace([]catalog.Instance{in})
	s := &upstreamSource{conn: connection.Fixture{Kind: "docker", Catalog: cat, Standby: w}.Conn(), keepAlive: &keepAlive{},
		route: catalog.Route{Port: 8080}, wakeTimeout: 50e6}
	s.Port = 8080
	if err := s.provisionPages(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanupPages)
	return s, cat
}

// monitorRequest is GET path for host h with the User-Agent ua from
// client, as Caddy's server hands it to reverse_proxy (the original
// request and client_ip in its context).
func monitorRequest(path, ua, client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://h"+path, nil)
	r.Header.Set("User-Agent", ua)
	r.RemoteAddr = client + ":40000"
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: client})
	ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *r.Clone(context.Background()))
	return r.WithContext(ctx)
}

// answerOf sends r to the one upstream ups holds, a page server, and
// returns its status, Dicer-State header and body.
func answerOf(t *testing.T, r *http.Request, ups []*reverseproxy.Upstream) (int, string, string) {
	t.Helper()
	if len(ups) != 1 {
		t.Fatalf("%d upstreams, want the page server's", len(ups))
	}
	req, _ := http.NewRequest(r.Method, "http://"+ups[0].Dial+r.URL.Path, nil)
	req.Header.Set(pages.Header, r.Header.Get(pages.Header))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get(pages.StateHeader), string(b)
}

// R5r, without Caddy: a request the sleeping container ignores (by
// User-Agent, path or client) gets 200 with Dicer-State: asleep and
// wakes nothing; another request wakes it.
func TestGetUpstreams_R5r_ignored_request_does_not_wake(t *testing.T) {
	f := &fakeActions{}
	s, _ := ignoringSource(t, f, catalog.StateStopped, "ua:UptimeRobot, path:/healthz, cidr:192.0.2.0/24")
	for _, r := range []*http.Request{
		monitorRequest("/", "Mozilla/5.0+(compatible; uptimerobot/2.0)", "198.51.100.1"),
		monitorRequest("/healthz", "curl/8", "198.51.100.1"),
		monitorRequest("/healthz/deep", "curl/8", "198.51.100.1"),
		monitorRequest("/", "curl/8", "192.0.2.77"),
	} {
		ups, err := s.GetUpstreams(r)
		if err != nil {
			t.Fatal(err)
		}
		status, state, body := answerOf(t, r, ups)
		if status != http.StatusOK || state != "asleep" {
			t.Errorf("%s %s from %s: %d, Dicer-State %q, %q; want 200 asleep", r.URL.Path, r.UserAgent(), r.RemoteAddr, status, state, body)
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d Engine calls for ignored requests, want none", n)
	}
	// Not ignored: /healthzx is another segment, the client another network.
	_, _ = s.GetUpstreams(monitorRequest("/healthzx", "curl/8", "198.51.100.1"))
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d Engine calls for a request not ignored, want its start", n)
	}
}

// R5r, without Caddy: to a running container an ignored request is
// proxied as any other, but is not its use: its idle clock does not
// start nor move, and it is not counted in flight by us.
func TestGetUpstreams_R5r_ignored_request_is_no_activity(t *testing.T) {
	f := &fakeActions{}
	s, cat := ignoringSource(t, f, catalog.StateRunning, "ua:kuma")
	act := cat.Snapshot().Targets(nil, s.route, "h")[0].Activity
	ctx, end := context.WithCancel(context.Background())
	r := monitorRequest("/", "Uptime-Kuma/1.23", "198.51.100.1")
	ups, err := s.GetUpstreams(r.WithContext(ctx))
	if err != nil || len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" {
		t.Fatalf("ignored request to a running container: %v, %v; want it proxied", ups, err)
	}
	if !act.Last().IsZero() || act.InFlight() != 0 {
		t.Errorf("an ignored request counted: last %v, %d in flight", act.Last(), act.InFlight())
	}
	end()
	if _, err := s.GetUpstreams(monitorRequest("/", "curl/8", "198.51.100.1")); err != nil {
		t.Fatal(err)
	}
	if act.Last().IsZero() {
		t.Error("a request not ignored did not count")
	}
}
