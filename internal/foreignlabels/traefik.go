package foreignlabels

import (
	"slices"
	"strconv"
	"strings"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Traefik's Docker labels (its Docker provider's routing reference). What
// a dynamic source can do, and so what is read:
//
//	traefik.enable=true                       (false: the labels are not read)
//	traefik.http.routers.<r>.rule=Host(`a.example.com`) && PathPrefix(`/api`)
//	traefik.http.routers.<r>.service=<s>      one of this instance's services
//	traefik.http.routers.<r>.entrypoints=web,websecure
//	traefik.http.routers.<r>.tls=true
//	traefik.http.routers.<r>.tls.certresolver=<any>
//	traefik.http.services.<s>.loadbalancer.server.port=8080
//	traefik.http.services.<s>.loadbalancer.server.scheme=http
//	traefik.docker.network=<network>
//
// Rules: Host (one or more names) and PathPrefix, joined by && and ||,
// in parentheses, as long as they come to a set of hosts times a set of
// prefixes (every host with every prefix). Entry points: only web,
// websecure, http and https, which stand for Caddy's own HTTP and HTTPS
// listeners; Caddy serves the site on both (redirecting HTTP to HTTPS
// as its automatic HTTPS does), whichever a router names. TLS: `tls=true`
// and `tls.certresolver` ask for a certificate, which Caddy's automatic
// HTTPS or on-demand permission gives; `tls.options` and `tls.domains`
// are refused. Anything else (middlewares, other matchers, priority,
// TCP and UDP routers, a service's health check, stickiness, url or
// transport, a router without a rule: Traefik's defaultRule is not
// known here) refuses the instance (R2f). A router's PathPrefix keeps
// the prefix (Traefik strips only through a middleware).

type traefikRouter struct {
	rule, service, ruleKey string
}

type traefikService struct {
	port uint16
}

// Traefik translates Traefik's Docker labels. A zero Translated (From
// "") and no refusal: the instance carries none, or traefik.enable=false.
func Traefik(labels map[string]string) (Translated, *Refusal) {
	const from = NameTraefik
	keys, r := keysOf(labels, from, isTraefikKey)
	if r != nil || len(keys) == 0 {
		return Translated{}, r
	}
	switch e := labels["traefik.enable"]; strings.ToLower(strings.TrimSpace(e)) {
	case "false":
		return Translated{}, nil
	case "true", "":
	default:
		return Translated{}, &Refusal{From: from, Label: "traefik.enable", Why: "is neither true nor false"}
	}
	t := Translated{From: from}
	routers := map[string]*traefikRouter{}
	services := map[string]*traefikService{}
	var routerNames, serviceNames []string
	refuse := func(k, why, caddyfile string) (Translated, *Refusal) {
		return Translated{}, &Refusal{From: from, Label: k, Why: why, Caddyfile: caddyfile}
	}
	for _, k := range keys {
		v := strings.TrimSpace(labels[k])
		switch {
		case k == "traefik.enable":
			continue
		case k == "traefik.docker.network":
			if v == "" || strings.ContainsAny(v, " \t\n,") {
				return refuse(k, "names no single network", "")
			}
			t.Network = v
			continue
		}
		if rest, ok := strings.CutPrefix(k, "traefik.http.routers."); ok {
			name, attr, _ := strings.Cut(rest, ".")
			rt := routers[name]
			if rt == nil {
				if len(routers) == maxSites {
					return refuse(k, "more than "+strconv.Itoa(maxSites)+" routers", "")
				}
				rt = &traefikRouter{}
				routers[name] = rt
				routerNames = append(routerNames, name)
			}
			switch attr {
			case "rule":
				rt.rule, rt.ruleKey = v, k
			case "service":
				rt.service = v
			case "entrypoints":
				for ep := range strings.SplitSeq(v, ",") {
					switch strings.TrimSpace(ep) {
					case "web", "websecure", "http", "https":
					default:
						return refuse(k, "names an entry point other than web, websecure, http and https (Caddy's own HTTP and HTTPS listeners)", "a site on that listener's address")
					}
				}
			case "tls", "tls.certresolver":
				if attr == "tls" && v != "true" && v != "false" {
					return refuse(k, "is neither true nor false", "")
				}
			case "middlewares":
				return refuse(k, "applies middlewares, which a dynamic source cannot do: the router is not routed rather than routed without them", "the middlewares' directives (basic_auth, header, redir...) in the site")
			default:
				return refuse(k, "sets the router's "+quote(attr)+", which a dynamic source cannot do", "")
			}
			continue
		}
		if rest, ok := strings.CutPrefix(k, "traefik.http.services."); ok {
			name, attr, _ := strings.Cut(rest, ".")
			sv := services[name]
			if sv == nil {
				if len(services) == maxSites {
					return refuse(k, "more than "+strconv.Itoa(maxSites)+" services", "")
				}
				sv = &traefikService{}
				services[name] = sv
				serviceNames = append(serviceNames, name)
			}
			switch attr {
			case "loadbalancer.server.port":
				n, err := strconv.ParseUint(v, 10, 16)
				if err != nil || n == 0 {
					return refuse(k, "is not a port from 1 to 65535", "")
				}
				sv.port = uint16(n)
			case "loadbalancer.server.scheme":
				if v != "http" {
					return refuse(k, "asks for the scheme "+strconv.QuoteToASCII(clip(v))+", which the route's transport decides", "reverse_proxy { transport http { tls } }")
				}
			default:
				return refuse(k, "sets the service's "+quote(attr)+", which a dynamic source cannot do", "")
			}
			continue
		}
		switch {
		case strings.HasPrefix(k, "traefik.http.middlewares."):
			return refuse(k, "defines a middleware, which a dynamic source cannot do", "the middleware's directives in the site")
		case strings.HasPrefix(k, "traefik.tcp.") || strings.HasPrefix(k, "traefik.udp."):
			return refuse(k, "is a TCP or UDP router or service; caddy-dicer's layer4 routes are written in the Caddyfile", "a layer4 route with dynamic dicer")
		}
		return refuse(k, "is no Traefik label a dynamic source reads", "")
	}
	if len(routers) == 0 {
		return refuse("traefik.http.routers", "the instance has no router with a rule; Traefik's defaultRule is not read", "")
	}
	var hosts, paths []string
	var port uint16
	for i, name := range routerNames {
		rt := routers[name]
		if rt.ruleKey == "" {
			return refuse("traefik.http.routers."+name+".rule", "the router has no rule; Traefik's defaultRule is not read", "")
		}
		h, p, why := ruleRoutes(rt.rule)
		if why != "" {
			return refuse(rt.ruleKey, why, "")
		}
		svc := rt.service
		if svc == "" && len(serviceNames) == 1 {
			svc = serviceNames[0]
		}
		var pt uint16
		if svc != "" {
			sv := services[svc]
			if sv == nil {
				return refuse("traefik.http.routers."+name+".service", "names a service this instance does not define", "")
			}
			pt = sv.port
		} else if len(serviceNames) > 1 {
			return refuse("traefik.http.routers."+name+".service", "the instance defines several services and the router names none", "")
		}
		if i == 0 {
			hosts, paths, port = h, p, pt
			continue
		}
		if pt != port {
			return refuse("traefik.http.routers."+name+".service", "the routers go to different ports; an instance serves on one", "")
		}
		// Routers add up: still hosts × prefixes?
		if slices.Equal(p, paths) {
			for _, x := range h {
				if !slices.Contains(hosts, x) {
					hosts = append(hosts, x)
				}
			}
		} else if slices.Equal(h, hosts) {
			for _, x := range p {
				if !slices.Contains(paths, x) {
					paths = append(paths, x)
				}
			}
			if slices.Contains(p, "/") || slices.Contains(paths, "/") {
				return refuse(rt.ruleKey, "the routers mix a whole site and prefixes of it", "")
			}
		} else {
			return refuse(rt.ruleKey, "the routers' hosts and prefixes are not every host with every prefix", "")
		}
		if len(hosts) > catalog.MaxHostNames || len(paths) > 32 {
			return refuse(rt.ruleKey, "the routers list too many hosts or prefixes", "")
		}
	}
	t.Hosts, t.Port = hosts, port
	if !(len(paths) == 1 && paths[0] == "/") {
		t.Paths = paths
	}
	return t, nil
}

// isTraefikKey reports a key Traefik reads: `traefik.*`, and a key its
// label decoder lets through in another case (`Traefik.http.*`,
// `TRAEFIK.TCP.*`: it matches `traefik.http`, `traefik.tcp`,
// `traefik.udp` and `traefik.tls` regardless of case). Such a key is no
// label read here, so it refuses the instance: Traefik would not have
// routed it either, and it may carry a middleware.
func isTraefikKey(k string) bool {
	if strings.HasPrefix(k, "traefik.") {
		return true
	}
	for _, f := range [...]string{"traefik.http", "traefik.tcp", "traefik.udp", "traefik.tls"} {
		if len(k) >= len(f) && strings.EqualFold(k[:len(f)], f) {
			return true
		}
	}
	return false
}

// clause is one alternative of a rule: hosts (nil: any) and prefixes
// (nil: any).
type clause struct{ hosts, paths []string }

// ruleRoutes reads a router rule into its hosts and path prefixes ("/"
// for none), which must be every host with every prefix.
func ruleRoutes(rule string) (hosts, paths []string, why string) {
	if len(rule) > 1024 {
		return nil, nil, "the rule is over 1024 bytes"
	}
	p := &ruleParser{s: rule}
	cs, why := p.or(0)
	if p.skip(); why == "" && p.i != len(p.s) {
		why = "the rule has more after " + strconv.QuoteToASCII(clip(p.s[:p.i]))
	}
	if why != "" {
		return nil, nil, why
	}
	pairs := map[[2]string]bool{}
	for _, c := range cs {
		if c.hosts == nil {
			return nil, nil, "an alternative of the rule names no Host; a route of a dynamic source needs one"
		}
		ps := c.paths
		if ps == nil {
			ps = []string{"/"}
		}
		for _, h := range c.hosts {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
			for _, x := range ps {
				if !slices.Contains(paths, x) {
					paths = append(paths, x)
				}
				pairs[[2]string{h, x}] = true
			}
		}
		if len(hosts) > catalog.MaxHostNames || len(paths) > 32 {
			return nil, nil, "the rule lists too many hosts or prefixes"
		}
	}
	if len(pairs) != len(hosts)*len(paths) {
		return nil, nil, "the rule's hosts and prefixes are not every host with every prefix"
	}
	if len(paths) > 1 && slices.Contains(paths, "/") {
		return nil, nil, "the rule mixes a whole site and prefixes of it"
	}
	return hosts, paths, ""
}

// ruleParser reads Traefik's rule grammar, the subset of it read here:
//
//	or     = and { "||" and }
//	and    = factor { "&&" factor }
//	factor = "(" or ")" | Host(args) | PathPrefix(args)
//	args   = string { "," string }     strings in backquotes or double quotes
type ruleParser struct {
	s string
	i int
}

func (p *ruleParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *ruleParser) eat(tok string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *ruleParser) or(depth int) ([]clause, string) {
	cs, why := p.and(depth)
	for why == "" && p.eat("||") {
		var more []clause
		if more, why = p.and(depth); why == "" {
			if cs = append(cs, more...); len(cs) > maxClauses {
				why = "the rule has more than " + strconv.Itoa(maxClauses) + " alternatives"
			}
		}
	}
	return cs, why
}

func (p *ruleParser) and(depth int) ([]clause, string) {
	cs, why := p.factor(depth)
	for why == "" && p.eat("&&") {
		var rhs []clause
		if rhs, why = p.factor(depth); why != "" {
			break
		}
		if len(cs)*len(rhs) > maxClauses {
			return nil, "the rule has more than " + strconv.Itoa(maxClauses) + " alternatives"
		}
		var out []clause
		for _, a := range cs {
			for _, b := range rhs {
				if a.hosts != nil && b.hosts != nil || a.paths != nil && b.paths != nil {
					return nil, "the rule joins two Host or two PathPrefix matchers with &&"
				}
				out = append(out, clause{hosts: cmpOr(a.hosts, b.hosts), paths: cmpOr(a.paths, b.paths)})
			}
		}
		cs = out
	}
	return cs, why
}

func cmpOr(a, b []string) []string {
	if a != nil {
		return a
	}
	return b
}

func (p *ruleParser) factor(depth int) ([]clause, string) {
	if depth >= maxDepth {
		return nil, "the rule nests parentheses more than " + strconv.Itoa(maxDepth) + " deep"
	}
	if p.eat("(") {
		cs, why := p.or(depth + 1)
		if why == "" && !p.eat(")") {
			why = "the rule misses a )"
		}
		return cs, why
	}
	p.skip()
	start := p.i
	for p.i < len(p.s) && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z') {
		p.i++
	}
	name := p.s[start:p.i]
	switch name {
	case "Host", "PathPrefix":
	case "":
		return nil, "the rule has " + strconv.QuoteToASCII(clip(p.s[start:])) + " where a matcher should be (negation and others are not read)"
	default:
		return nil, "the rule uses the matcher " + strconv.QuoteToASCII(clip(name)) + "; only Host and PathPrefix are read"
	}
	if !p.eat("(") {
		return nil, "the rule's " + name + " has no ("
	}
	var args []string
	for {
		p.skip()
		if p.i >= len(p.s) || p.s[p.i] != '`' && p.s[p.i] != '"' {
			return nil, "the rule's " + name + " has an argument that is not quoted"
		}
		q := p.s[p.i]
		end := strings.IndexByte(p.s[p.i+1:], q)
		if end < 0 {
			return nil, "the rule has an unterminated string"
		}
		args = append(args, p.s[p.i+1:p.i+1+end])
		p.i += end + 2
		if !p.eat(",") {
			break
		}
	}
	if !p.eat(")") {
		return nil, "the rule's " + name + " misses a )"
	}
	if name == "Host" {
		var hs []string
		for _, a := range args {
			h, bad := hostsOf(a)
			if bad != "" || len(h) != 1 {
				return nil, "the rule's Host " + strconv.QuoteToASCII(clip(a)) + " is not a host name"
			}
			hs = append(hs, h[0])
		}
		return []clause{{hosts: hs}}, ""
	}
	var ps []string
	for _, a := range args {
		if !strings.HasPrefix(a, "/") {
			return nil, "the rule's PathPrefix " + strconv.QuoteToASCII(clip(a)) + " does not start with /"
		}
		x, bad := catalog.NormalizePathPrefix(a)
		if bad != "" {
			return nil, "the rule's PathPrefix " + strconv.QuoteToASCII(clip(a)) + " " + bad
		}
		ps = append(ps, x)
	}
	return []clause{{paths: ps}}, ""
}
