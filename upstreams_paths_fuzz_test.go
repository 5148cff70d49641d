package caddydicer

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// FuzzPathMatch routes a request path among three instances labelled
// caddy.path and one without (R2d) and checks the catalog against a naive
// oracle that tries every prefix of every instance, and against Caddy's
// own path matcher: the instances of a prefix P get a request only if
// `path P P/*` matches it, and the root's only if no claimed prefix's
// matcher does.
func FuzzPathMatch(f *testing.F) {
	for _, seed := range [][4]string{
		{"/api", "/api/v2", "/admin", "/api/v2/x"},
		{"/api", "/API/", "api,/b", "/Api/../b/c"},
		{"/a/../b", "/", "", "//a//b/"},
		{"/a", "/a", "/a/b,/c", "/a%2Fb"},
		{"/x y", "/%41", "/ü", "/Ü/x"},
		{"/api", "/api/v2", "", "/api/v2/"},
		{"/a", "/a/b", "", "/a/b/.."},
		{"/a", "", "", "/."},
		{"/a/b", "/a", "", "/a/b/c/./d"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, l1, l2, l3, reqPath string) {
		labels := map[string]string{"a": l1, "b": l2, "c": l3, "root": ""}
		var list []catalog.Instance
		for _, name := range []string{"a", "b", "c", "root"} {
			l := map[string]string{"caddy.host": "h.test"}
			if labels[name] != "" {
				l["caddy.path"] = labels[name]
			}
			list = append(list, catalog.Instance{ID: name, Name: name, Labels: l, State: catalog.StateRunning,
				Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.1"}}})
		}
		c := catalog.New(catalog.Options{})
		c.Replace(list)
		if got, want := catalog.RequestPath(reqPath), naiveRequestPath(reqPath); got != want {
			t.Fatalf("RequestPath(%q) = %q, want %q", reqPath, got, want)
		}
		route := catalog.Route{Port: 80, Path: reqPath} // as the client sent it: the catalog normalizes
		var got []string
		for _, tg := range c.Snapshot().Targets(nil, route, "h.test") {
			got = append(got, tg.Instance)
		}
		want, prefix, claimed := pathOracle(labels, reqPath)
		if !slices.Equal(got, want) {
			t.Fatalf("labels %q, path %q: got %v, want %v (prefix %q)", labels, reqPath, got, want, prefix)
		}
		if p := c.Snapshot().PathPrefix(route, "h.test", false); p != prefix {
			t.Fatalf("labels %q, path %q: PathPrefix %q, want %q", labels, reqPath, p, prefix)
		}
		if prefix != "/" && !caddyMatches(t, prefix, reqPath) {
			t.Fatalf("path %q routed to %q, which Caddy's path %s %s/* does not match", reqPath, want, prefix, prefix)
		}
		if prefix == "/" {
			for _, p := range claimed {
				if p != "/" && caddyMatches(t, p, reqPath) {
					t.Fatalf("path %q routed to the root, but Caddy's path %s %s/* matches it", reqPath, p, p)
				}
			}
		}
	})
}

// pathOracle is R2d the slow way: the instances (by name) a request for
// rawPath goes to, the prefix matched, and every prefix claimed.
func pathOracle(labels map[string]string, rawPath string) (names []string, prefix string, claimed []string) {
	p := naiveRequestPath(rawPath)
	prefixes := map[string][]string{} // name -> prefixes; nil: no label; empty: not valid
	for name, raw := range labels {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		valid := []string{}
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			n, why := catalog.NormalizePathPrefix(item)
			if why != "" {
				valid = nil
				break
			}
			if !slices.Contains(valid, n) {
				valid = append(valid, n)
			}
		}
		if len(raw) > catalog.MaxPathLabelBytes || len(valid) > catalog.MaxPathPrefixes {
			valid = nil
		}
		if valid == nil {
			valid = []string{}
		}
		prefixes[name] = valid
		claimed = append(claimed, valid...)
	}
	prefix = "/"
	for _, c := range claimed {
		if (c == "/" || p == c || strings.HasPrefix(p, c+"/")) && len(c) > len(prefix) {
			prefix = c
		}
	}
	for _, name := range []string{"a", "b", "c", "root"} {
		ps, labelled := prefixes[name]
		if prefix == "/" && !labelled || slices.Contains(ps, prefix) {
			names = append(names, name)
		}
	}
	return names, prefix, claimed
}

// naiveRequestPath is catalog.RequestPath without its shortcut for a path
// already in form.
func naiveRequestPath(rawPath string) string {
	if !strings.HasPrefix(rawPath, "/") {
		return "/"
	}
	return path.Clean(strings.ToLower(rawPath))
}

// caddyMatches reports whether Caddy's `path prefix prefix/*` matches a
// request whose decoded path is p.
func caddyMatches(t *testing.T, prefix, p string) bool {
	m := caddyhttp.MatchPath{prefix, prefix + "/*"}
	if err := m.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	r := &http.Request{URL: &url.URL{Path: p}}
	r = r.WithContext(context.WithValue(context.Background(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
	ok, err := m.MatchWithError(r)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
