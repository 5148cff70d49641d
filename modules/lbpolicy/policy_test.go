package lbpolicy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pick"
)

// pickedRequest is a request with Caddy's variables, and the upstreams a
// source handed out for it, recorded as a source records them for a
// route whose policy reads them.
func pickedRequest(targets ...catalog.Target) (*http.Request, []*reverseproxy.Upstream) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
	block := make([]pick.Upstream, len(targets))
	ups := make([]*reverseproxy.Upstream, len(targets))
	for i, t := range targets {
		block[i].Dial, block[i].Name, block[i].Weight, block[i].Identity = t.Dial, t.Instance, t.Weight, t.Identity
		ups[i] = &block[i].Upstream
	}
	pick.Record(r, block)
	return r, ups
}

func TestWeightedSelection_R4c(t *testing.T) {
	r, pool := pickedRequest(
		catalog.Target{Instance: "a", Dial: "10.0.0.1:80", Weight: 90, Identity: "a"},
		catalog.Target{Instance: "b", Dial: "10.0.0.2:80", Weight: 10, Identity: "b"},
		catalog.Target{Instance: "spare", Dial: "10.0.0.3:80", Weight: 0, Identity: "spare"},
	)
	counts := map[string]int{}
	const n = 100000
	for range n {
		counts[WeightedSelection{}.Select(pool, r, nil).Dial]++
	}
	if b := float64(counts["10.0.0.2:80"]) / n; b < 0.09 || b > 0.11 || counts["10.0.0.3:80"] != 0 {
		t.Fatalf("90/10/0: %v, want b 10%% ± 1%% and the spare none", counts)
	}

	// Only spares available: they share.
	spares := map[string]int{}
	for range 1000 {
		spares[WeightedSelection{}.Select(pool[2:], r, nil).Dial]++
	}
	if spares["10.0.0.3:80"] != 1000 {
		t.Errorf("only the spare: %v", spares)
	}

	// A retry's block is found, and upstreams not handed out weigh 1.
	r2, pool2 := pickedRequest(catalog.Target{Dial: "10.0.0.9:80", Weight: 0})
	pick.Record(r2, []pick.Upstream{{Upstream: reverseproxy.Upstream{Dial: "x"}, Weight: 7}})
	foreign := &reverseproxy.Upstream{Dial: "10.0.0.8:80"}
	p := pick.Of(r2)
	if p.WeightOf(pool2[0]) != 0 || p.WeightOf(foreign) != 1 || p.IdentityOf(foreign) != "dial:10.0.0.8:80" {
		t.Errorf("weightOf/identityOf: %d %d %q", p.WeightOf(pool2[0]), p.WeightOf(foreign), p.IdentityOf(foreign))
	}
	if got := (WeightedSelection{}).Select(append([]*reverseproxy.Upstream{foreign}, pool2...), r2, nil); got != foreign {
		t.Errorf("a static upstream of weight 1 beside a spare: got %v", got)
	}
	if got := (WeightedSelection{}).Select(nil, r, nil); got != nil {
		t.Error("empty pool: want nil")
	}
}

func TestStickySelection_R4d(t *testing.T) {
	s := &StickySelection{Name: "dicer_session", fallback: WeightedSelection{}, macs: &macCache{key: []byte("k"), route: "dicer_session", byIdentity: map[macKey]string{}}}
	targets := []catalog.Target{
		{Instance: "web-1", Dial: "10.0.0.1:80", Weight: 1, Identity: "web-1"},
		{Instance: "web-2", Dial: "10.0.0.2:80", Weight: 1, Identity: "web-2"},
	}
	r, pool := pickedRequest(targets...)
	w := httptest.NewRecorder()
	first := s.Select(pool, r, w)
	cookie := w.Result().Cookies()
	if first == nil || len(cookie) != 1 || strings.Contains(cookie[0].Value, "web") || !cookie[0].HttpOnly {
		t.Fatalf("first request: %v, cookies %v", first, cookie)
	}
	name := "web-1"
	if first.Dial == "10.0.0.2:80" {
		name = "web-2"
	}

	// Same identity at new addresses: the session stays, no new cookie.
	moved := []catalog.Target{
		{Instance: "web-1", Dial: "10.0.1.1:80", Weight: 1, Identity: "web-1"},
		{Instance: "web-2", Dial: "10.0.1.2:80", Weight: 1, Identity: "web-2"},
	}
	for range 50 {
		r, pool := pickedRequest(moved...)
		r.AddCookie(cookie[0])
		w := httptest.NewRecorder()
		got := s.Select(pool, r, w)
		if want := map[string]string{"web-1": "10.0.1.1:80", "web-2": "10.0.1.2:80"}[name]; got.Dial != want || len(w.Result().Cookies()) != 0 {
			t.Fatalf("recreated: got %s (cookies %v), want %s and no new cookie", got.Dial, w.Result().Cookies(), want)
		}
	}

	// Its identity gone: placed elsewhere, with a new cookie.
	var rest []catalog.Target
	for _, t := range moved {
		if t.Identity != name {
			rest = append(rest, t)
		}
	}
	r, pool = pickedRequest(rest...)
	r.AddCookie(cookie[0])
	w = httptest.NewRecorder()
	if got := s.Select(pool, r, w); got != pool[0] || len(w.Result().Cookies()) != 1 || w.Result().Cookies()[0].Value == cookie[0].Value {
		t.Fatalf("identity gone: got %v, cookies %v; want the other instance and a new cookie", got, w.Result().Cookies())
	}

	// Another secret's cookie is a new session.
	other := &StickySelection{Name: "dicer_session", fallback: WeightedSelection{}, macs: &macCache{key: []byte("other"), route: "dicer_session", byIdentity: map[macKey]string{}}}
	r, pool = pickedRequest(targets...)
	r.AddCookie(cookie[0])
	w = httptest.NewRecorder()
	other.Select(pool, r, w)
	if len(w.Result().Cookies()) != 1 {
		t.Errorf("another secret's cookie: want a new cookie, got %v", w.Result().Cookies())
	}

	// The cache of MACs is bounded.
	for i := range maxMACs + 10 {
		s.macs.of("h", strings.Repeat("x", i%100)+string(rune('a'+i%26))+string(rune(i)))
	}
	if len(s.macs.byIdentity) > maxMACs {
		t.Errorf("MAC cache holds %d, want at most %d", len(s.macs.byIdentity), maxMACs)
	}
}

// TestStickySelection_R4d_cookie_bound_to_host_and_route: a cookie earned
// on one host, or on a route with another cookie name, is a new session
// elsewhere, even where the same identity serves: it cannot pin a client
// to a warm spare (weight 0) that new sessions never reach.
func TestStickySelection_R4d_cookie_bound_to_host_and_route(t *testing.T) {
	newPolicy := func(name string) *StickySelection {
		return &StickySelection{Name: name, fallback: WeightedSelection{}, macs: &macCache{key: []byte("k"), route: name, byIdentity: map[macKey]string{}}}
	}
	s := newPolicy("dicer_session")
	targets := []catalog.Target{
		{Instance: "web", Dial: "10.0.0.1:80", Weight: 1, Identity: "web"},
		{Instance: "spare", Dial: "10.0.0.2:80", Weight: 0, Identity: "spare"},
	}
	// A session earned on a.localhost while only the spare was up.
	r, pool := pickedRequest(targets[1])
	r.Host = "a.localhost"
	w := httptest.NewRecorder()
	if got := s.Select(pool, r, w); got == nil || got.Dial != "10.0.0.2:80" {
		t.Fatalf("a.localhost with only the spare: got %v", got)
	}
	spareCookie := w.Result().Cookies()[0]

	for _, tc := range []struct {
		name, host string
		policy     *StickySelection
		pinned     bool
	}{
		{"same host, same route", "a.localhost:443", s, true},
		{"same host in capitals", "A.LOCALHOST", s, true},
		{"another host", "b.localhost", s, false},
		{"the same route after a reload", "a.localhost", newPolicy("dicer_session"), true},
	} {
		for range 20 {
			r, pool := pickedRequest(targets...)
			r.Host = tc.host
			r.AddCookie(spareCookie)
			w := httptest.NewRecorder()
			got := tc.policy.Select(pool, r, w)
			if onSpare := got.Dial == "10.0.0.2:80"; onSpare != tc.pinned {
				t.Fatalf("%s: on the spare %v, want %v", tc.name, onSpare, tc.pinned)
			}
			if !tc.pinned && len(w.Result().Cookies()) != 1 {
				t.Fatalf("%s: want a new session cookie, got %v", tc.name, w.Result().Cookies())
			}
		}
	}
	other := newPolicy("other_session")
	h := other.macs.of("a.localhost", "spare")
	if h == s.macs.of("a.localhost", "spare") {
		t.Error("two routes (cookie names) give the same MAC for one host and identity")
	}
	if s.macs.of("a.localhostx", "y") == s.macs.of("a.localhost", "xy") {
		t.Error("host and identity run together in the MAC")
	}
}

func TestPolicies_Caddyfile(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"dicer_weighted", ""},
		{"dicer_weighted extra", "wrong argument count"},
		{"dicer_weighted {\n x\n}", "no settings"},
		{"dicer_sticky", ""},
		{"dicer_sticky sess s3cret {\n fallback dicer_weighted\n max_age 1h\n}", ""},
		{"dicer_sticky a b c", "wrong argument count"},
		{"dicer_sticky {\n max_age -1s\n}", "positive duration"},
		{"dicer_sticky {\n fallback nosuch\n}", "nosuch"},
		{"dicer_sticky {\n color red\n}", "unrecognized"},
	} {
		d := caddyfile.NewTestDispenser(tc.in)
		var err error
		if strings.HasPrefix(tc.in, "dicer_weighted") {
			err = new(WeightedSelection).UnmarshalCaddyfile(d)
		} else {
			s := new(StickySelection)
			err = s.UnmarshalCaddyfile(d)
			if err == nil && strings.Contains(tc.in, "sess") && (s.Name != "sess" || s.Secret != "s3cret" || s.FallbackRaw == nil || s.MaxAge == 0) {
				t.Errorf("%q: parsed %+v", tc.in, s)
			}
		}
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		}
	}
}
