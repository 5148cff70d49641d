package catalog_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// path sets the caddy.path label.
func path(p string) opt { return label(catalog.LabelPath, p) }

// pick is the names of the targets a request for host and path gets on
// route, joined by spaces ("" for none).
func pick(snap *catalog.Snapshot, route catalog.Route, host, p string) string {
	route.Path = catalog.RequestPath(p)
	var names []string
	for _, t := range snap.Targets(nil, route, catalog.NormalizeHost(host)) {
		names = append(names, t.Instance)
	}
	return strings.Join(names, " ")
}

func TestNormalizePathPrefix_R2d(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/api", "/api"}, {"api", "/api"}, {"/api/", "/api"}, {"/API/V2//", "/api/v2"}, {"/", "/"}, {"", "/"},
		{"/a/../b", ""}, {"/a/./b", ""}, {"/a//b", ""}, {"/a%2fb", ""}, {"/a*", ""}, {"/{x}", ""}, {"/a b", ""},
		{"/a?b", ""}, {"/a#b", ""}, {`/a\b`, ""}, {"/\xff", ""}, {"/ümlaut", "/ümlaut"},
	} {
		got, why := catalog.NormalizePathPrefix(tc.in)
		if got != tc.want || (got == "") != (why != "") {
			t.Errorf("NormalizePathPrefix(%q) = %q, %q; want %q", tc.in, got, why, tc.want)
		}
	}
}

func TestTargets_R2d_longest_prefix(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{
		inst("root", host("a.test,*.w.test"), addr("10.0.0.1")),
		inst("api", host("a.test,*.w.test"), path("/api"), addr("10.0.0.2")),
		inst("v2", host("a.test"), path("/api/v2,/V3/"), addr("10.0.0.3")),
		inst("admin", host("a.test"), path("/admin"), state(catalog.StateStopped), addr("10.0.0.4")),
		inst("bad", host("a.test"), path("/x/../y"), addr("10.0.0.5")),
		inst("other", host("b.test"), addr("10.0.0.6")),
		inst("sel-api", label("app", "web"), path("/api"), addr("10.0.0.7")),
		inst("sel-root", label("app", "web"), addr("10.0.0.8")),
		inst("sel-b", label("app", "web"), host("b.test"), path("/b"), addr("10.0.0.9")),
	})
	snap := c.Snapshot()
	v := watch(c, "app=web")
	sel := catalog.Route{Port: 80, View: v}
	byHost := catalog.Route{Port: 80}
	snap = c.Snapshot()
	for _, tc := range []struct {
		route      catalog.Route
		host, path string
		want       string
	}{
		{byHost, "a.test", "/", "root"},
		{byHost, "a.test", "/index.html", "root"},
		{byHost, "a.test", "/api", "api"},
		{byHost, "a.test", "/api/", "api"},
		{byHost, "a.test", "/api/x", "api"},
		{byHost, "a.test", "/apix", "root"},
		{byHost, "a.test", "/API/X", "api"},
		{byHost, "a.test", "/api/v2", "v2"},
		{byHost, "a.test", "/api/v2/users", "v2"},
		{byHost, "a.test", "/api/v20", "api"},
		{byHost, "a.test", "/v3/x", "v2"},
		{byHost, "a.test", "/api/../admin", ""}, // admin claims it, and is stopped: 503, never the root
		{byHost, "a.test", "/admin/../api/v2/x", "v2"},
		{byHost, "a.test", "//api//v2", "v2"},
		{byHost, "a.test", "/api/./v2/.", "v2"},
		{byHost, "a.test", "/../../api", "api"},
		{byHost, "a.test", "/x/y", "root"}, // bad's label claims nothing
		{byHost, "b.test", "/api", "other"},
		{byHost, "x.w.test", "/api/v2", "api"},
		{byHost, "x.w.test", "/", "root"},
		{sel, "a.test", "/api/x", "sel-api"},
		{sel, "a.test", "/", "sel-root"},
		{sel, "a.test", "/b/x", "sel-root"}, // sel-b serves b.test only
		{sel, "b.test", "/b/x", "sel-b"},
		{sel, "b.test", "/bx", "sel-root"},
		{sel, "c.test", "/api", "sel-api"},
	} {
		if got := pick(snap, tc.route, tc.host, tc.path); got != tc.want {
			t.Errorf("%s%s on %v: got %q, want %q", tc.host, tc.path, tc.route.View != nil, got, tc.want)
		}
	}
	route := byHost
	route.Path = catalog.RequestPath("/api/v2/x")
	if p := snap.PathPrefix(route, "a.test", false); p != "/api/v2" {
		t.Errorf("PathPrefix = %q, want /api/v2", p)
	}
	route.Path, route.PathExact = "/api", true // as a multi whose other daemon claims no more
	if got := pick(snap, route, "a.test", "/api"); got != "api" {
		t.Errorf("PathExact /api: got %q", got)
	}
	route.Path = "/zzz"
	if got := pick(snap, route, "a.test", "/zzz"); got != "" {
		t.Errorf("PathExact on a prefix nobody claims here: got %q, want none", got)
	}
}

// TestPut_R2d_paths_follow_changes checks that the tries follow single
// changes as a re-listing would build them.
func TestPut_R2d_paths_follow_changes(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Replace([]catalog.Instance{inst("root", host("a.test"), label("app", "web"))})
	route := catalog.Route{Port: 80}
	sel := catalog.Route{Port: 80, View: v}
	if got := pick(c.Snapshot(), route, "a.test", "/api"); got != "root" {
		t.Fatalf("before: %q", got)
	}
	c.Put(inst("api", host("a.test"), path("/api"), label("app", "web")))
	for _, r := range []catalog.Route{route, sel} {
		if got := pick(c.Snapshot(), r, "a.test", "/api/x"); got != "api" {
			t.Errorf("after Put: %q", got)
		}
		if got := pick(c.Snapshot(), r, "a.test", "/x"); got != "root" {
			t.Errorf("after Put, root: %q", got)
		}
	}
	c.Put(inst("root", host("a.test"), label("app", "web"), state(catalog.StatePaused)))
	c.Put(inst("root", host("a.test"), label("app", "web")))
	if got := pick(c.Snapshot(), route, "a.test", "/x"); got != "root" {
		t.Errorf("after the root's change: %q", got)
	}
	c.Put(inst("api", host("a.test"), path("/other"), label("app", "web")))
	if got := pick(c.Snapshot(), sel, "a.test", "/api/x"); got != "root" {
		t.Errorf("after the label's change: %q", got)
	}
	c.Delete("id-api")
	if got := pick(c.Snapshot(), route, "a.test", "/other"); got != "root" {
		t.Errorf("after Delete: %q", got)
	}
}

func TestParsePaths_R2d_caps(t *testing.T) {
	many := make([]string, catalog.MaxPathPrefixes+1)
	for i := range many {
		many[i] = fmt.Sprintf("/p%d", i)
	}
	for name, label := range map[string]string{
		"too many": strings.Join(many, ","),
		"too long": "/" + strings.Repeat("a", catalog.MaxPathLabelBytes),
		"bad":      "/ok,/a/../b",
		"empty":    " , ",
	} {
		c := catalog.New(catalog.Options{})
		c.Replace([]catalog.Instance{inst("root", host("a.test")), inst("x", host("a.test"), port("80"), path(label))})
		if got := pick(c.Snapshot(), catalog.Route{Port: 80}, "a.test", "/p1"); got != "root" {
			t.Errorf("%s: got %q, want root (a bad label claims nothing, serves nothing)", name, got)
		}
		if got := pick(c.Snapshot(), catalog.Route{Port: 80}, "a.test", "/"); got != "root" {
			t.Errorf("%s: got %q at the root, want root", name, got)
		}
		st := c.Instances(nil)
		if st[1].Routable || !strings.Contains(st[1].Verdict, "caddy.path") {
			t.Errorf("%s: status %+v", name, st[1])
		}
		if !c.Snapshot().Claimed("a.test") {
			t.Errorf("%s: the host is no longer claimed", name)
		}
	}
}

// TestClaimed_R2d_a_path_claim_grants_no_host: the permission (R7) sees
// hosts only.
func TestClaimed_R2d_a_path_claim_grants_no_host(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{inst("api", host("a.test"), path("/api,/b.test,b.test"))})
	snap := c.Snapshot()
	if !snap.Claimed("a.test") || snap.Claimed("b.test") || snap.Claimed("a.test/api") {
		t.Errorf("claims: a.test %v, b.test %v", snap.Claimed("a.test"), snap.Claimed("b.test"))
	}
}

func TestExplain_R2d_says_why_the_path_excludes(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{inst("root", host("a.test")), inst("api", host("a.test"), path("/api"))})
	route := catalog.Route{Port: 80, Path: "/api/x"}
	got := c.Snapshot().Explain(route, "a.test")
	if len(got) != 2 || got[0].Instance != "api" || !got[0].Target || got[1].Target ||
		!strings.Contains(got[1].Why, "under /api") {
		t.Errorf("Explain = %+v", got)
	}
}

// Whether a prefix is cut is the instances' caddy.strip_path, else the
// source's strip_path_prefix (dflt); instances of one prefix that
// disagree get it uncut, so one instance's label never changes the path
// another that keeps its prefix is sent; a label that is neither true nor
// false makes its instance serve no path.
func TestStripPrefix_R2d_per_instance(t *testing.T) {
	c := catalog.New(catalog.Options{})
	strip := func(v string) opt { return label(catalog.LabelStripPath, v) }
	c.Replace([]catalog.Instance{
		inst("root", host("a.test"), strip("true"), addr("10.0.0.1")),
		inst("cut", host("a.test"), path("/cut"), strip("true"), addr("10.0.0.2")),
		inst("keep", host("a.test"), path("/keep"), strip(" False "), addr("10.0.0.3")),
		inst("plain", host("a.test"), path("/plain"), addr("10.0.0.4")),
		inst("mixed-a", host("a.test"), path("/mixed"), strip("true"), addr("10.0.0.5")),
		inst("mixed-b", host("a.test"), path("/mixed"), strip("false"), addr("10.0.0.6")),
		inst("half-a", host("a.test"), path("/half"), strip("true"), addr("10.0.0.7")),
		inst("half-b", host("a.test"), path("/half"), addr("10.0.0.8")),
		inst("bad", host("a.test"), path("/bad"), strip("yes"), addr("10.0.0.9")),
	})
	snap := c.Snapshot()
	for _, tc := range []struct {
		path string
		dflt bool
		want string
	}{
		{"/", true, ""}, {"/x", true, ""}, // the root is never cut
		{"/cut/x", false, "/cut"}, {"/cut/x", true, "/cut"},
		{"/keep/x", true, ""}, {"/keep/x", false, ""},
		{"/plain/x", true, "/plain"}, {"/plain/x", false, ""},
		{"/mixed/x", true, ""}, {"/mixed/x", false, ""},
		{"/half/x", true, "/half"}, {"/half/x", false, ""},
		{"/bad/x", true, ""},
	} {
		route := catalog.Route{Port: 80, Path: tc.path}
		if got := snap.StripPrefix(route, "a.test", false, tc.dflt); got != tc.want {
			t.Errorf("StripPrefix(%s, default %v) = %q, want %q", tc.path, tc.dflt, got, tc.want)
		}
	}
	if got := pick(snap, catalog.Route{Port: 80}, "a.test", "/bad/x"); got != "root" {
		t.Errorf("/bad/x goes to %q, want root: a bad caddy.strip_path claims no prefix", got)
	}
}

// Hostile: on a selector route, an instance restricted by caddy.host to
// its own host has no say in how another host's requests under the same
// prefix are sent; on a listed host, a tenant that claims the prefix
// beside another and disagrees gets it uncut for both (never cut for an
// instance that keeps it).
func TestStripPrefix_R2d_another_hosts_label_has_no_say(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{
		inst("t1", label("app", "web"), host("t1.test"), path("/api"), label(catalog.LabelStripPath, "false"), addr("10.0.0.1")),
		inst("t2", label("app", "web"), host("t2.test"), path("/api"), label(catalog.LabelStripPath, "true"), addr("10.0.0.2")),
		inst("keeps", host("a.test"), path("/api"), label(catalog.LabelStripPath, "false"), addr("10.0.0.3")),
		inst("intruder", host("a.test"), path("/api"), label(catalog.LabelStripPath, "true"), addr("10.0.0.4")),
	})
	v := watch(c, "app=web")
	snap := c.Snapshot()
	sel := catalog.Route{Port: 80, View: v, Path: "/api/x"}
	if got := snap.StripPrefix(sel, "t2.test", false, false); got != "/api" {
		t.Errorf("t2.test on the selector route: cut %q, want /api (t1 serves t1.test only)", got)
	}
	if got := snap.StripPrefix(sel, "t1.test", false, true); got != "" {
		t.Errorf("t1.test on the selector route: cut %q, want nothing", got)
	}
	if got := snap.StripPrefix(catalog.Route{Port: 80, Path: "/api/x"}, "a.test", false, true); got != "" {
		t.Errorf("a.test: cut %q, want nothing: keeps keeps its prefix", got)
	}
}
