package foreignlabels

import (
	"slices"
	"strconv"
	"strings"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// caddy-docker-proxy's labels (its README, "Labels to Caddyfile
// conversion"): `caddy` or `caddy_N` is a site's address, and
// `caddy[_N].<directive>[.<subdirective>...]` its directives; a
// directive name may carry an ordering prefix `N_` and an isolating
// suffix `_N`. What a dynamic source can do, and so what is read:
//
//	caddy: a.example.com b.example.com         hosts, comma or space separated
//	caddy.reverse_proxy: {{upstreams [http] [port]}}
//	caddy.handle_path: /api/*                  prefix stripped
//	caddy.handle_path.0_reverse_proxy: {{upstreams 8080}}
//	caddy.handle: /api/*                       prefix kept
//	caddy.handle.0_reverse_proxy: {{upstreams}}
//	caddy_ingress_network: frontend
//
// Anything else on a site (basic_auth, header, redir, encode, tls,
// matchers `@name`, snippets `(name)`, import, global options, templates
// other than upstreams) refuses the instance (R2f).

// cdpRoute is one reverse_proxy of a site: under a prefix or not.
type cdpRoute struct {
	path     string // "" the whole site
	strip    bool
	port     uint16
	key      string // the reverse_proxy label
	matcher  string // the handle's label, if under one
	hasProxy bool
}

// CaddyDockerProxy translates caddy-docker-proxy's labels. A zero
// Translated (From "") and no refusal: the instance carries none. The
// instance's own caddy-dicer labels (catalog.KnownLabels) are not
// caddy-docker-proxy's.
func CaddyDockerProxy(labels map[string]string) (Translated, *Refusal) {
	const from = NameCaddyDockerProxy
	keys, r := keysOf(labels, from, isCDPKey)
	if r != nil || len(keys) == 0 {
		return Translated{}, r
	}
	t := Translated{From: from}
	sites := map[string]*cdpSite{}
	var siteKeys []string
	for _, k := range keys {
		v := labels[k]
		if k == "caddy_ingress_network" {
			t.Network = strings.TrimSpace(v)
			if t.Network == "" || strings.ContainsAny(t.Network, " \t\n,") {
				return Translated{}, &Refusal{From: from, Label: k, Why: "names no single network"}
			}
			continue
		}
		sk, rest, _ := strings.Cut(k, ".")
		if sk != "caddy" && !isDigits(strings.TrimPrefix(sk, "caddy_")) {
			return Translated{}, &Refusal{From: from, Label: k, Why: "is no caddy-docker-proxy label a dynamic source reads"}
		}
		s := sites[sk]
		if s == nil {
			if len(sites) == maxSites {
				return Translated{}, &Refusal{From: from, Label: k, Why: "the instance has more than " + strconv.Itoa(maxSites) + " sites"}
			}
			s = &cdpSite{routes: map[string]*cdpRoute{}, firstKey: k}
			sites[sk] = s
			siteKeys = append(siteKeys, sk)
		}
		if rest == "" {
			s.addr, s.hasKey = v, true
			continue
		}
		segs := strings.Split(rest, ".")
		name := directiveName(segs[0])
		switch {
		case name == "reverse_proxy" && len(segs) == 1:
			rt := route(s.routes, &s.order, segs[0])
			if rr := rt.proxy(k, v); rr != nil {
				return Translated{}, rr
			}
		case (name == "handle" || name == "handle_path") && len(segs) == 1:
			rt := route(s.routes, &s.order, segs[0])
			p, why := cdpPathMatcher(v)
			if why != "" {
				return Translated{}, &Refusal{From: from, Label: k, Why: why, Caddyfile: name + " " + v}
			}
			rt.path, rt.strip, rt.matcher = p, name == "handle_path", k
		case (name == "handle" || name == "handle_path") && len(segs) == 2 && directiveName(segs[1]) == "reverse_proxy":
			rt := route(s.routes, &s.order, segs[0])
			if rr := rt.proxy(k, v); rr != nil {
				return Translated{}, rr
			}
		default:
			return Translated{}, refuseDirective(k, segs, v)
		}
	}
	// Every site must be one and the same route set: hosts × paths.
	var first []cdpRoute
	for i, sk := range siteKeys {
		s := sites[sk]
		if !s.hasKey {
			return Translated{}, &Refusal{From: from, Label: s.firstKey, Why: "belongs to no site (a global option or a snippet's): a dynamic source reads sites", Caddyfile: "the global options block"}
		}
		if strings.HasPrefix(strings.TrimSpace(s.addr), "(") {
			return Translated{}, &Refusal{From: from, Label: sk, Why: "defines a snippet; snippets and import are not read", Caddyfile: s.addr + " { ... }"}
		}
		hosts, bad := hostsOf(s.addr)
		if bad != "" {
			return Translated{}, &Refusal{From: from, Label: sk, Why: "site address " + strconv.QuoteToASCII(clip(bad)) + " is not host names (no scheme, port, path or placeholder)"}
		}
		for _, h := range hosts {
			if !slices.Contains(t.Hosts, h) {
				if len(t.Hosts) == catalog.MaxHostNames {
					return Translated{}, &Refusal{From: from, Label: sk, Why: "the sites list more than " + strconv.Itoa(catalog.MaxHostNames) + " hosts"}
				}
				t.Hosts = append(t.Hosts, h)
			}
		}
		var rs []cdpRoute
		for _, name := range s.order {
			rt := s.routes[name]
			if !rt.hasProxy {
				return Translated{}, &Refusal{From: from, Label: rt.matcher, Why: "handles a path with no reverse_proxy {{upstreams}} in it"}
			}
			if rt.matcher == "" && strings.HasPrefix(directiveName(name), "handle") {
				return Translated{}, &Refusal{From: from, Label: rt.key, Why: "is in a handle with no path matcher"}
			}
			rs = append(rs, *rt)
		}
		if len(rs) == 0 {
			return Translated{}, &Refusal{From: from, Label: sk, Why: "the site has no reverse_proxy {{upstreams}}"}
		}
		slices.SortFunc(rs, func(a, b cdpRoute) int { return strings.Compare(a.path, b.path) })
		for _, rt := range rs[1:] {
			if rt.strip != rs[0].strip || rt.port != rs[0].port || rt.path == "" || rs[0].path == "" && rt.strip {
				return Translated{}, &Refusal{From: from, Label: rt.key, Why: "the site's routes differ in prefix stripping or port; an instance has one of each"}
			}
		}
		if i == 0 {
			first = rs
			continue
		}
		if !sameRoutes(first, rs) {
			return Translated{}, &Refusal{From: from, Label: sk, Why: "the site's paths, stripping or port differ from another site's of the instance; an instance serves one set of paths on all its hosts"}
		}
	}
	t.Strip, t.Port = first[0].strip, first[0].port
	for _, rt := range first {
		if rt.path != "" && rt.path != "/" {
			t.Paths = append(t.Paths, rt.path)
		}
	}
	if len(t.Paths) > 0 && first[0].path == "" {
		t.Paths = nil // the whole site, with a kept prefix too: the whole site
	}
	return t, nil
}

// cdpSite is one site of an instance's caddy-docker-proxy labels.
type cdpSite struct {
	addr     string
	hasKey   bool
	firstKey string
	// routes by their directive's key (reverse_proxy, handle_path_1...).
	routes map[string]*cdpRoute
	order  []string
}

// isCDPKey reports a key caddy-docker-proxy reads: `caddy`, `caddy_*`,
// `caddy.*`, but not caddy-dicer's own.
func isCDPKey(k string) bool {
	if k != "caddy" && !strings.HasPrefix(k, "caddy_") && !strings.HasPrefix(k, "caddy.") {
		return false
	}
	return !slices.Contains(catalog.KnownLabels, k) && k != catalog.LabelRefused
}

// route returns the site's route of directive key name, made if new.
func route(routes map[string]*cdpRoute, order *[]string, name string) *cdpRoute {
	rt := routes[name]
	if rt == nil {
		rt = &cdpRoute{}
		routes[name] = rt
		*order = append(*order, name)
	}
	return rt
}

// proxy reads a reverse_proxy label's value: {{upstreams [http] [port]}}
// and nothing else.
func (rt *cdpRoute) proxy(key, v string) *Refusal {
	if rt.hasProxy {
		return &Refusal{From: NameCaddyDockerProxy, Label: key, Why: "a second reverse_proxy in one route"}
	}
	port, why := upstreams(v)
	if why != "" {
		return &Refusal{From: NameCaddyDockerProxy, Label: key, Why: why, Caddyfile: "reverse_proxy " + v}
	}
	rt.port, rt.key, rt.hasProxy = port, key, true
	return nil
}

// upstreams reads `{{upstreams [scheme] [port]}}`: caddy-docker-proxy's
// default port is 80 (reverse_proxy's for an address without one).
func upstreams(v string) (port uint16, why string) {
	inner, ok := strings.CutPrefix(strings.TrimSpace(v), "{{")
	if ok {
		inner, ok = strings.CutSuffix(inner, "}}")
	}
	f := strings.Fields(inner)
	if !ok || len(f) == 0 || f[0] != "upstreams" || len(f) > 3 {
		return 0, "is not reverse_proxy {{upstreams [scheme] [port]}} alone (matchers, other upstreams and options are not read)"
	}
	port = 80
	for i, a := range f[1:] {
		switch {
		case i == 0 && a == "http":
		case i == 0 && (a == "https" || a == "h2c"):
			return 0, "asks for the scheme " + a + ", which the route's transport decides"
		default:
			n, err := strconv.ParseUint(a, 10, 16)
			if err != nil || n == 0 || i != len(f)-2 {
				return 0, "is not reverse_proxy {{upstreams [http] [port]}}"
			}
			port = uint16(n)
		}
	}
	return port, ""
}

// cdpPathMatcher reads a handle's path matcher: `/api/*` or `/api*` (the
// prefix /api, matched on segment boundaries), `*` or `/*` the whole site.
func cdpPathMatcher(v string) (prefix, why string) {
	v = strings.TrimSpace(v)
	if v == "*" || v == "/*" {
		return "/", ""
	}
	p, ok := strings.CutSuffix(v, "*")
	if !ok || !strings.HasPrefix(p, "/") {
		return "", "is not a path prefix matcher (/prefix/*); other matchers are not read"
	}
	prefix, bad := catalog.NormalizePathPrefix(p)
	if bad != "" {
		return "", "path " + bad
	}
	return prefix, ""
}

// directiveName is a label segment without caddy-docker-proxy's ordering
// prefix `N_` and isolating suffix `_N`.
func directiveName(seg string) string {
	if i := strings.IndexByte(seg, '_'); i > 0 && isDigits(seg[:i]) {
		seg = seg[i+1:]
	}
	if i := strings.LastIndexByte(seg, '_'); i >= 0 && isDigits(seg[i+1:]) {
		seg = seg[:i]
	}
	return seg
}

func isDigits(s string) bool {
	if s == "" || len(s) > 4 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// refuseDirective refuses a directive a dynamic source cannot do, with
// the Caddyfile line that would do it.
func refuseDirective(key string, segs []string, v string) *Refusal {
	name := directiveName(segs[0])
	why := "asks for " + quote(name) + ", which a dynamic source cannot do"
	switch {
	case strings.HasPrefix(name, "@"):
		why = "defines the matcher " + quote(name) + "; matchers are not read"
	case name == "basic_auth" || name == "basicauth" || name == "forward_auth":
		why = "protects the site with " + name + ", which a dynamic source cannot do: the site is not routed rather than routed unprotected"
		v = "..." // no credentials in logs
	case name == "tls":
		why = "sets the site's TLS, which Caddy's own config decides"
	case name == "import":
		why = "imports a snippet; snippets and import are not read"
	case name == "reverse_proxy" || name == "handle" || name == "handle_path":
		why = "sets " + name + " options or nests it otherwise; only reverse_proxy {{upstreams}}, alone or in a handle or handle_path, is read"
	}
	for _, s := range segs[1:] {
		if n := directiveName(s); n == "basic_auth" || n == "basicauth" || n == "forward_auth" {
			v = "..." // nested, as in handle_path { basic_auth { ... } }: no credentials in logs either
		}
	}
	line := name
	for _, s := range segs[1:] {
		line += " { " + directiveName(s)
	}
	line += " " + v + strings.Repeat(" }", len(segs)-1)
	return &Refusal{From: NameCaddyDockerProxy, Label: key, Why: why, Caddyfile: line}
}

// sameRoutes compares two sites' sorted routes.
func sameRoutes(a, b []cdpRoute) bool {
	return slices.EqualFunc(a, b, func(x, y cdpRoute) bool {
		return x.path == y.path && x.strip == y.strip && x.port == y.port
	})
}
