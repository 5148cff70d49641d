package caddydicer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
)

// A finding of the outsider's review (R4f): a client that hangs up before
// the instance answered left no status, and the rollout counted its
// request as an error of the instance it went to. An outsider with no
// label and no account could so fail a healthy version: abort each
// request a little after the old version's answer time (so only the
// slower new one's are cut), or stick to the new version's instance
// (dicer_sticky) and hang up, or raise the rate of both versions so that
// the new one's few requests swing past the threshold by chance. Caddy's
// reverse_proxy itself calls a client's hang-up "not our failure; don't
// ding the upstream" (a 499, and no error for the server): the rollout
// now leaves such a request out of both versions' figures. An attempt
// that failed upstream (a refused or reset connection, a timeout: Caddy
// answers 502/504 and sets {http.error}) is still an error.
func TestRollout_R4f_a_client_that_hangs_up_is_no_error_of_the_version(t *testing.T) {
	c := benchCatalog(10)
	src := benchSource(connection.Fixture{Kind: "docker", Address: "unix:///outsider.sock", Catalog: c}.Conn())
	benchObserved(&src)
	src.rollout = &routeRollout{s: &src, name: "outsider"}
	src.rollout.counting.Store(true)
	w := benchWriter{http.Header{}}
	serve := func(status int, upstreamErr error) {
		repl := caddy.NewReplacer()
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil).WithContext(ctx)
		r = caddyhttp.PrepareRequest(r, repl, w, nil)
		ups, err := src.GetUpstreams(r)
		if err != nil || len(ups) == 0 {
			t.Fatal(err)
		}
		repl.Set("http.reverse_proxy.upstream.hostport", ups[0].Dial)
		if status != 0 {
			repl.Set("http.reverse_proxy.status_code", status)
			repl.Set("http.reverse_proxy.upstream.latency", 3*time.Millisecond)
		}
		if upstreamErr != nil { // as Caddy's server does with a handler's error
			repl.Set("http.error", caddyhttp.Error(http.StatusBadGateway, upstreamErr))
		}
		cancel()
	}
	total := func() rollout.Sample {
		instanceSeries.sweep()
		var s rollout.Sample
		src.rollout.counters.Range(func(_, v any) bool { v.(*rollout.Counters).AddTo(&s); return true })
		return s
	}
	for range 10 {
		serve(200, nil)
	}
	for range 30 {
		serve(0, nil) // the client hung up before the answer
	}
	if s := total(); s.Errors != 0 || s.Requests != 10 {
		t.Errorf("10 answers and 30 clients that hung up: %d requests, %d errors counted; want 10 and 0", s.Requests, s.Errors)
	}
	serve(0, errors.New("dial tcp: connection refused"))
	serve(503, nil)
	if s := total(); s.Errors != 2 || s.Requests != 12 {
		t.Errorf("then a refused connection and a 503: %d requests, %d errors; want 12 and 2", s.Requests, s.Errors)
	}
}
