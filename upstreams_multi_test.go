package caddydicer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// member is a source over its own catalog, holding instances, routing by
// sel ("" by caddy.host) to port 8080.
func member(t testing.TB, sel string, instances ...catalog.Instance) *upstreamSource {
	t.Helper()
	c := catalog.New(catalog.Options{})
	c.Replace(instances)
	s := &upstreamSource{conn: connection.Fixture{Catalog: c}.Conn(), route: catalog.Route{Port: 8080}}
	if sel != "" {
		s.route.View = c.Watch(selector.MustParse(sel))
	}
	return s
}

// grouped makes sources the members of one multi's group, in that order.
func grouped(sources ...*upstreamSource) {
	g := new(sourceGroup)
	members := slices.Clone(sources)
	g.members.Store(&members)
	for _, s := range sources {
		s.group = g
	}
}

// routed is a running instance at ip, with labels as key, value pairs.
func routed(name, ip string, labels ...string) catalog.Instance {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return catalog.Instance{
		ID: name, Name: name, Labels: l, State: catalog.StateRunning,
		Networks: []catalog.Attachment{{Network: "default", Address: ip}},
	}
}

// asleep is an instance on standby that a connection to host port hostPort
// wakes (R5).
func asleep(name string, hostPort uint16, labels ...string) catalog.Instance {
	i := routed(name, "10.9.9.9", labels...)
	i.State, i.WakeOnConnect = catalog.StateStandby, true
	i.Ports = []catalog.PublishedPort{{HostIP: "192.0.2.1", HostPort: hostPort, GuestPort: 8080, Protocol: catalog.TCP}}
	return i
}

// waking is a wakeable instance that runs but has no health verdict yet
// (R5.1).
func waking(name, ip string, labels ...string) catalog.Instance {
	i := routed(name, ip, labels...)
	i.WakeOnConnect, i.Health = true, catalog.HealthStarting
	return i
}

// multiDials is what the multi returns for a request for host: each
// source's upstreams in turn, as Caddy's MultiUpstreams appends them.
func multiDials(t *testing.T, host string, sources ...*upstreamSource) []string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	var dials []string
	for _, s := range sources {
		ups, err := s.GetUpstreams(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ups {
			dials = append(dials, u.Dial)
		}
	}
	return dials
}

// TestMultiGroup is R5 and R2a across the daemons of one `dynamic multi`:
// what the route gets, grouped, against what it would get if each source
// answered alone.
func TestMultiGroup(t *testing.T) {
	web := []string{"app", "web"}
	for _, tc := range []struct {
		name    string
		sources func() []*upstreamSource
		host    string
		alone   []string // each source on its own (Caddy's multi without the group)
		want    []string
	}{
		{
			name: "routable_in_both_in_source_order",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "app=web", routed("b-1", "10.0.1.2", web...), routed("b-0", "10.0.1.1", web...)),
					member(t, "app=web", routed("a-1", "10.0.2.1", web...)),
				}
			},
			alone: []string{"10.0.1.1:8080", "10.0.1.2:8080", "10.0.2.1:8080"},
			want:  []string{"10.0.1.1:8080", "10.0.1.2:8080", "10.0.2.1:8080"},
		},
		{
			name: "R5_no_standby_woken_while_another_daemon_has_a_routable_instance",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "app=web", asleep("a-0", 32768, web...)),
					member(t, "app=web", routed("b-0", "10.0.2.1", web...)),
				}
			},
			alone: []string{"192.0.2.1:32768", "10.0.2.1:8080"},
			want:  []string{"10.0.2.1:8080"},
		},
		{
			name: "R5_one_wake_across_daemons_the_first_source",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "app=web", asleep("a-0", 32768, web...)),
					member(t, "app=web", asleep("b-0", 32769, web...)),
				}
			},
			alone: []string{"192.0.2.1:32768", "192.0.2.1:32769"},
			want:  []string{"192.0.2.1:32768"},
		},
		{
			name: "R5_an_instance_on_its_way_up_before_a_standby_one_of_an_earlier_source",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "app=web", asleep("a-0", 32768, web...)),
					member(t, "app=web", waking("b-0", "10.0.2.1", web...)),
				}
			},
			alone: []string{"192.0.2.1:32768", "10.0.2.1:8080"},
			want:  []string{"10.0.2.1:8080"},
		},
		{
			name: "R5_the_first_of_two_on_their_way_up",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "app=web", waking("a-0", "10.0.1.1", web...)),
					member(t, "app=web", waking("b-0", "10.0.2.1", web...)),
				}
			},
			alone: []string{"10.0.1.1:8080", "10.0.2.1:8080"},
			want:  []string{"10.0.1.1:8080"},
		},
		{
			name: "R2a_a_name_listed_on_one_daemon_leaves_the_others_wildcards_out",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "", routed("any", "10.0.1.1", "caddy.host", "*.example.com")),
					member(t, "", routed("shop", "10.0.2.1", "caddy.host", "shop.example.com")),
				}
			},
			host:  "shop.example.com",
			alone: []string{"10.0.1.1:8080", "10.0.2.1:8080"},
			want:  []string{"10.0.2.1:8080"},
		},
		{
			name: "R2a_a_stopped_instance_listing_the_name_still_takes_it",
			sources: func() []*upstreamSource {
				stopped := routed("shop", "10.0.2.1", "caddy.host", "shop.example.com")
				stopped.State = catalog.StateStopped
				return []*upstreamSource{
					member(t, "", routed("any", "10.0.1.1", "caddy.host", "*.example.com")),
					member(t, "", stopped),
				}
			},
			host:  "shop.example.com",
			alone: []string{"10.0.1.1:8080"},
		},
		{
			// A selector route's candidates are the instances its selector
			// matches: an outsider on another daemon, even stopped, takes
			// no name from its tenant's wildcard (R2a among the route's
			// own candidates).
			name: "R2a_an_outsider_of_the_selectors_takes_no_name_from_their_wildcard",
			sources: func() []*upstreamSource {
				outsider := routed("outsider", "10.0.2.1", "caddy.host", "pr-42.preview.example.com")
				outsider.State = catalog.StateStopped
				return []*upstreamSource{
					member(t, "tenant=trusted", routed("preview", "10.0.1.1", "caddy.host", "*.preview.example.com", "tenant", "trusted")),
					member(t, "tenant=trusted", outsider),
				}
			},
			host:  "pr-42.preview.example.com",
			alone: []string{"10.0.1.1:8080"},
			want:  []string{"10.0.1.1:8080"},
		},
		{
			name: "R2a_an_outsider_on_the_same_daemon_takes_no_name_from_the_selectors_wildcard",
			sources: func() []*upstreamSource {
				outsider := routed("outsider", "10.0.1.2", "caddy.host", "pr-42.preview.example.com")
				outsider.State = catalog.StateStopped
				return []*upstreamSource{
					member(t, "tenant=trusted", routed("preview", "10.0.1.1", "caddy.host", "*.preview.example.com", "tenant", "trusted"), outsider),
					member(t, "tenant=trusted"),
				}
			},
			host:  "pr-42.preview.example.com",
			alone: []string{"10.0.1.1:8080"},
			want:  []string{"10.0.1.1:8080"},
		},
		{
			name: "R2a_a_candidate_of_another_selector_takes_the_name",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "tenant=trusted", routed("preview", "10.0.1.1", "caddy.host", "*.preview.example.com", "tenant", "trusted")),
					member(t, "tenant=trusted", routed("pr", "10.0.2.1", "caddy.host", "pr-42.preview.example.com", "tenant", "trusted")),
				}
			},
			host:  "pr-42.preview.example.com",
			alone: []string{"10.0.1.1:8080", "10.0.2.1:8080"},
			want:  []string{"10.0.2.1:8080"},
		},
		{
			name: "R2a_wildcards_serve_names_nobody_lists",
			sources: func() []*upstreamSource {
				return []*upstreamSource{
					member(t, "", routed("any", "10.0.1.1", "caddy.host", "*.example.com")),
					member(t, "", routed("shop", "10.0.2.1", "caddy.host", "shop.example.com")),
				}
			},
			host:  "blog.example.com",
			alone: []string{"10.0.1.1:8080"},
			want:  []string{"10.0.1.1:8080"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host
			if host == "" {
				host = "x.example.net"
			}
			alone := tc.sources()
			if got := multiDials(t, host, alone...); !slices.Equal(got, tc.alone) {
				t.Errorf("each source alone: got %q, want %q", got, tc.alone)
			}
			members := tc.sources()
			grouped(members...)
			if got := multiDials(t, host, members...); !slices.Equal(got, tc.want) {
				t.Errorf("grouped: got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMultiGroupAllocations: a member costs what a lone source costs on
// the path where its own instances serve (two allocations: the upstreams
// and the list of them; addresses are spelt once per instance), and
// reading the other members' catalogs allocates nothing: a member whose
// fallback is held back allocates nothing.
func TestMultiGroupAllocations(t *testing.T) {
	web := []string{"app", "web"}
	a := member(t, "app=web", routed("a-0", "10.0.1.1", web...))
	b := member(t, "app=web", asleep("b-0", 32768, web...))
	grouped(a, b)
	req := httptest.NewRequest(http.MethodGet, "http://x.example.net/", nil)
	for _, tc := range []struct {
		name string
		s    *upstreamSource
		want float64
	}{{"routable", a, 2}, {"fallback_held_back", b, 0}} {
		if n := testing.AllocsPerRun(100, func() { _, _ = tc.s.GetUpstreams(req) }); n != tc.want {
			t.Errorf("%s: %v allocations per request, want %v", tc.name, n, tc.want)
		}
	}
}

// BenchmarkMultiGroup is a request through one source of a `dynamic multi`
// of three daemons (1,000 instances each), against the same source alone
// (the baseline): by selector where this source's instances serve, by
// host where another daemon's instance lists the host (the R2a lookups),
// and where this source's fallback is held back because another daemon
// has a routable instance (the R5 check).
func BenchmarkMultiGroup(b *testing.B) {
	web := []string{"app", "web"}
	many := func(prefix string, extra ...catalog.Instance) []catalog.Instance {
		list := append([]catalog.Instance(nil), extra...)
		for i := range 1000 {
			list = append(list, routed(fmt.Sprintf("%s-%04d", prefix, i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1),
				"caddy.host", fmt.Sprintf("h%d.%s.example.com", i, prefix)))
		}
		return list
	}
	type source struct {
		sel       string
		instances []catalog.Instance
	}
	for _, tc := range []struct {
		name    string
		host    string
		sources []source // the first is the one measured
		want    int
	}{
		{"selector_routable", "x.example.net", []source{
			{"app=web", many("a", routed("a-web-1", "10.0.0.1", web...), routed("a-web-2", "10.0.0.2", web...))},
			{"app=web", many("b", routed("b-web-1", "10.0.1.1", web...))},
			{"app=web", many("c")},
		}, 2},
		{"host_listed_on_another_daemon", "h7.c.example.com", []source{
			{"", many("a")}, {"", many("b")}, {"", many("c")},
		}, 0},
		{"fallback_held_back", "x.example.net", []source{
			{"app=web", many("a", asleep("a-web-1", 32768, web...))},
			{"app=web", many("b")},
			{"app=web", many("c", routed("c-web-1", "10.0.1.1", web...))},
		}, 0},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://"+tc.host+"/", nil)
		run := func(b *testing.B, s *upstreamSource, want int) {
			b.ReportAllocs()
			for b.Loop() {
				if ups, _ := s.GetUpstreams(req); len(ups) != want {
					b.Fatalf("got %d upstreams, want %d", len(ups), want)
				}
			}
		}
		alone := member(b, tc.sources[0].sel, tc.sources[0].instances...)
		wantAlone := tc.want
		if tc.name == "fallback_held_back" {
			wantAlone = 1 // alone, it returns its fallback
		}
		b.Run(tc.name+"/alone", func(b *testing.B) { run(b, alone, wantAlone) })
		var members []*upstreamSource
		for _, s := range tc.sources {
			members = append(members, member(b, s.sel, s.instances...))
		}
		grouped(members...)
		b.Run(tc.name+"/grouped", func(b *testing.B) { run(b, members[0], tc.want) })
	}
}

// TestMultiGroupThroughCaddysMulti loads Caddy's own multi source over two
// test daemons, with a source of another kind between them: our two
// sources form one group, in the multi's order, which Caddy's
// GetUpstreams then answers through (R5b), and the group is gone once the
// config is unloaded.
func TestMultiGroupThroughCaddysMulti(t *testing.T) {
	a, sockA := dicertest.OnSocket(t)
	b, sockB := dicertest.OnSocket(t)
	a.AsleepInstance(t, "a-asleep", "127.0.0.147", map[string]string{"app": "web"})
	b.HelloInstance(t, "b-web", "127.0.0.148", map[string]string{"app": "web"})
	ctx, cancel := newLoad(t)
	defer cancel()
	mod, err := ctx.LoadModuleByID("http.reverse_proxy.upstreams.multi", []byte(fmt.Sprintf(`{"sources": [
		{"source": "dicer", "selector": "app=web", "address": "unix:%s", "published_port_host": "192.0.2.147"},
		{"source": "a", "name": "127.0.0.1", "port": "1"},
		{"source": "dicer", "selector": "app=web", "address": "unix:%s"}
	]}`, sockA, sockB)))
	if err != nil {
		t.Fatal(err)
	}
	multi := mod.(*reverseproxy.MultiUpstreams)
	group, err := multiGroup(ctx, multi)
	if err != nil {
		t.Fatal(err)
	}
	members := *group.members.Load()
	if len(members) != 2 || members[0].conn == members[1].conn {
		t.Fatalf("group members %v, want the two dicer sources, each on its own connection", members)
	}

	// R5b: daemon b has a routable instance, so a's standby instance is
	// not returned, through Caddy's own GetUpstreams.
	req := httptest.NewRequest(http.MethodGet, "http://x.example.net/", nil)
	req = req.WithContext(context.WithValue(req.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
	ups, err := multi.GetUpstreams(req)
	if err != nil {
		t.Fatal(err)
	}
	var dials []string
	for _, u := range ups {
		dials = append(dials, u.Dial)
	}
	if len(dials) != 2 || dials[0] != "127.0.0.1:1" || !strings.HasPrefix(dials[1], "127.0.0.148:") {
		t.Errorf("upstreams %q, want the a source's 127.0.0.1:1, then b-web's (in the multi's order), and not a-asleep's", dials)
	}
	// The admin API says the same: no target on a, which defers to b.
	var ex diceradmin.Explanation
	if err := json.Unmarshal([]byte(adminServe(t, "/dicer/explain?host=x.example.net")), &ex); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range ex.Routes {
		switch r.Daemon {
		case "unix:" + sockA:
			seen++
			if len(r.Targets) != 0 || !r.Deferred || len(r.Candidates) != 1 || r.Candidates[0].Target {
				t.Errorf("explain, daemon a: %+v, want no target, deferred to b, a-asleep not a target", r)
			}
		case "unix:" + sockB:
			seen++
			if len(r.Targets) != 1 || !strings.HasPrefix(r.Targets[0], "b-web 127.0.0.148:") || r.Deferred {
				t.Errorf("explain, daemon b: %+v, want b-web the target", r)
			}
		}
	}
	if seen != 2 {
		t.Errorf("explain shows %d of the two daemons' routes: %+v", seen, ex.Routes)
	}

	cancel()
	if left := *group.members.Load(); len(left) != 0 {
		t.Errorf("the group has %d members after unload, want 0", len(left))
	}
}

// adminServe serves a GET of path by the admin.api.dicer module in process,
// without an admin endpoint, and returns the answer's body.
func adminServe(t *testing.T, path string) string {
	t.Helper()
	info, err := caddy.GetModule("admin.api.dicer")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(path)
	for _, r := range info.New().(caddy.AdminRouter).Routes() {
		if r.Pattern != u.Path {
			continue
		}
		rec := httptest.NewRecorder()
		if err := r.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil)); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return rec.Body.String()
	}
	t.Fatalf("GET %s: no admin route", path)
	return ""
}
