// Package labelsets holds the label sets of caddy-docker-proxy's README
// and examples/ and of Traefik's Docker provider documentation, each with
// what R2f makes of it: routed (hosts, path prefixes, stripped or kept,
// port, network) or refused (the label named). It is test data, shared by
// the translation's table tests (internal/foreignlabels) and the
// end-to-end tests that start each set on the real Engine under a real
// Caddy (e2e/engine, e2e/swarm); nothing else imports it.
//
// Every routed set is routed over plain HTTP: an upstream scheme other
// than http (caddy-docker-proxy's `{{upstreams https}}`, Traefik's
// `loadbalancer.server.scheme=https`) is refused.
package labelsets

import (
	"maps"
	"regexp"
	"strconv"
	"strings"
)

// Case is one label set and its outcome.
type Case struct {
	// Name names the case (a test's name, a container's name suffix).
	Name string
	// Source is where the set was taken from, "edge case ..." for one
	// that is not in the other proxy's documentation but probes a rule.
	Source string
	// Labels are the set, as the documentation writes it.
	Labels map[string]string
	// Want is what R2f makes of it.
	Want Want
}

// Want is a case's expected outcome.
type Want struct {
	// Hosts are the hosts routed (caddy.host), in order.
	Hosts []string
	// Paths are the path prefixes routed (caddy.path); none: the whole site.
	Paths []string
	// Strip says the prefix is stripped before the request goes on
	// (caddy.strip_path=true), else kept.
	Strip bool
	// Port is the port requests go to (caddy.port); 0: none named (the
	// container's only published port, R3).
	Port uint16
	// Network is the network requests go over (caddy.network).
	Network string
	// Refused is the label a refusal names; "" for a routed case.
	Refused string
	// None says the set does not apply at all (no foreign label read):
	// neither routed by it nor refused.
	None bool
	// Protected, with None, is the protection label (foreignlabels.
	// Protection) for which the container is refused all the same: R2f
	// refuses protections under every label set, read or not.
	Protected string
}

// Routed reports whether the case is routed by its foreign labels.
func (w Want) Routed() bool { return w.Refused == "" && !w.None }

// hostToken is a host name in a label's value: dotted (a wildcard's `*.`
// included) or localhost.
var hostToken = regexp.MustCompile(`(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+|\blocalhost\b`)

// HostKey reports a label whose value names hosts: caddy-docker-proxy's
// `caddy`, `caddy_N`; caddy-dicer's caddy.host; a Traefik router's rule.
func HostKey(k string) bool {
	if k == "caddy" || k == "caddy.host" {
		return true
	}
	if n, ok := strings.CutPrefix(k, "caddy_"); ok {
		_, err := strconv.Atoi(n)
		return err == nil
	}
	return strings.HasPrefix(k, "traefik.") && strings.HasSuffix(k, ".rule")
}

// RenameHosts rewrites, in the labels that name hosts (HostKey) and in
// Want.Hosts, each host name h to rename(h) (a test gives each run and
// case names of its own); renamed is told each name found in a label.
func (c *Case) RenameHosts(rename func(h string) string, renamed func(h, to string)) {
	for k, v := range c.Labels {
		if HostKey(k) {
			c.Labels[k] = hostToken.ReplaceAllStringFunc(v, func(h string) string {
				to := rename(h)
				renamed(h, to)
				return to
			})
		}
	}
	for j, h := range c.Want.Hosts {
		c.Want.Hosts[j] = rename(h)
	}
}

// clone gives each caller its own copy: a test may rewrite the labels.
func clone(cs []Case) []Case {
	out := make([]Case, len(cs))
	for i, c := range cs {
		c.Labels = maps.Clone(c.Labels)
		c.Want.Hosts = append([]string(nil), c.Want.Hosts...)
		c.Want.Paths = append([]string(nil), c.Want.Paths...)
		out[i] = c
	}
	return out
}

// CaddyDockerProxy returns the label sets of caddy-docker-proxy's
// README.md and examples/ (github.com/lucaslorentz/caddy-docker-proxy,
// read 2026-12-07 at d246679), and edge cases beside them, each with what
// R2f makes of it. The caller owns the copy.
func CaddyDockerProxy() []Case { return clone(cdp) }

// Traefik returns the label sets of Traefik's Docker provider
// documentation (github.com/traefik/traefik docs/content/, read
// 2026-12-07 at fd5a576: reference/routing-configuration/other-providers/docker.md,
// expose/docker/, setup/docker.md, getting-started/docker.md), and edge
// cases beside them, each with what R2f makes of it. The caller owns the
// copy.
func Traefik() []Case { return clone(traefik) }

var cdp = []Case{
	{Name: "readme_whoami", Source: "README.md, Basic usage example (Docker Compose): whoami/compose.yaml",
		Labels: map[string]string{"caddy": "whoami.example.com", "caddy.reverse_proxy": "{{upstreams 80}}"},
		Want:   Want{Hosts: []string{"whoami.example.com"}, Port: 80}},
	{Name: "readme_respond", Source: "README.md, Sites, snippets and global options",
		Labels: map[string]string{"caddy": "example.com", "caddy.respond": `"Hello World" 200`},
		Want:   Want{Refused: "caddy.respond"}},
	{Name: "readme_snippet_encode", Source: "README.md, Sites, snippets and global options",
		Labels: map[string]string{"caddy": "(encode)", "caddy.encode": "zstd gzip"},
		Want:   Want{Refused: "caddy.encode"}},
	{Name: "readme_snippet_import", Source: "README.md, Sites, snippets and global options",
		Labels: map[string]string{"caddy_0": "(snippet)", "caddy_0.tls": "internal",
			"caddy_1": "site-a.com", "caddy_1.import": "snippet", "caddy_2": "site-b.com", "caddy_2.import": "snippet"},
		Want: Want{Refused: "caddy_0.tls"}},
	{Name: "readme_global_email", Source: "README.md, Sites, snippets and global options; examples/standalone.yaml (caddy service)",
		Labels: map[string]string{"caddy.email": "you@example.com"},
		Want:   Want{Refused: "caddy.email"}},
	{Name: "readme_matcher_localhost", Source: "README.md, Sites, snippets and global options",
		Labels: map[string]string{"caddy": "localhost", "caddy.@match.path": "/api", "caddy.reverse_proxy": "@match localhost:6001"},
		Want:   Want{Refused: "caddy.@match.path"}},
	{Name: "readme_template_respond", Source: "README.md, Go templates",
		Labels: map[string]string{"caddy": "example.com", "caddy.respond": `/info "{{.Spec.Name}}"`},
		Want:   Want{Refused: "caddy.respond"}},
	{Name: "readme_upstreams_bare", Source: "README.md, Template functions: upstreams",
		Labels: map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"example.com"}, Port: 80}},
	{Name: "readme_upstreams_https", Source: "README.md, Template functions: upstreams",
		Labels: map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams https}}"},
		Want:   Want{Refused: "caddy.reverse_proxy"}},
	{Name: "readme_upstreams_port", Source: "README.md, Template functions: upstreams",
		Labels: map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams 8080}}"},
		Want:   Want{Hosts: []string{"example.com"}, Port: 8080}},
	{Name: "readme_upstreams_http_port", Source: "README.md, Template functions: upstreams",
		Labels: map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams http 8080}}"},
		Want:   Want{Hosts: []string{"example.com"}, Port: 8080}},
	{Name: "readme_rewrite", Source: "README.md, Examples: to a subpath in the container",
		Labels: map[string]string{"caddy": "example.com", "caddy.rewrite": "* /target{path}", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Refused: "caddy.rewrite"}},
	{Name: "readme_handle_keeps_prefix", Source: "README.md, Examples: requests matching a path",
		Labels: map[string]string{"caddy": "example.com", "caddy.handle": "/source/*", "caddy.handle.0_reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"example.com"}, Paths: []string{"/source"}, Port: 80}},
	{Name: "readme_handle_path_strips", Source: "README.md, Examples: matching a path, stripping that path prefix",
		Labels: map[string]string{"caddy": "example.com", "caddy.handle_path": "/source/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"example.com"}, Paths: []string{"/source"}, Strip: true, Port: 80}},
	{Name: "readme_handle_path_rewrite", Source: "README.md, Examples: matching a path, rewriting to different path prefix",
		Labels: map[string]string{"caddy": "example.com", "caddy.handle_path": "/source/*",
			"caddy.handle_path.0_rewrite": "* /target{uri}", "caddy.handle_path.1_reverse_proxy": "{{upstreams}}"},
		Want: Want{Refused: "caddy.handle_path.0_rewrite"}},
	{Name: "readme_websocket_matchers", Source: "README.md, Examples: all websocket requests, and all requests to /api*",
		Labels: map[string]string{"caddy": "example.com", "caddy.@ws.0_header": "Connection *Upgrade*",
			"caddy.@ws.1_header": "Upgrade websocket", "caddy.0_reverse_proxy": "@ws {{upstreams}}", "caddy.1_reverse_proxy": "/api* {{upstreams}}"},
		Want: Want{Refused: "caddy.0_reverse_proxy"}},
	{Name: "readme_multiple_domains", Source: "README.md, Examples: multiple domains",
		Labels: map[string]string{"caddy": "example.com, example.org, www.example.com, www.example.org", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"example.com", "example.org", "www.example.com", "www.example.org"}, Port: 80}},
	{Name: "readme_redir", Source: "README.md, Examples: Redirecting",
		Labels: map[string]string{"caddy": "example.com", "caddy.redir_0": "/favicon.ico  /alternative/icon.ico 302",
			"caddy.redir_1": "/photo.png    /updated-photo.png    302"},
		Want: Want{Refused: "caddy.redir_0"}},
	{Name: "readme_swarm_service", Source: "README.md, Proxying services vs containers (deploy.labels and labels)",
		Labels: map[string]string{"caddy": "service.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"service.example.com"}, Port: 80}},
	{Name: "readme_run_tls_internal", Source: "README.md, With run commands (whoami0); examples/standalone.yaml and distributed.yaml (whoami0, whoami2, whoami3)",
		Labels: map[string]string{"caddy": "whoami0.example.com", "caddy.reverse_proxy": "{{upstreams 80}}", "caddy.tls": "internal"},
		Want:   Want{Refused: "caddy.tls"}},
	{Name: "examples_tls_ca", Source: "examples/standalone.yaml and distributed.yaml (whoami1)",
		Labels: map[string]string{"caddy": "whoami1.example.com", "caddy.reverse_proxy": "{{upstreams 80}}",
			"caddy.tls.ca": "https://acme-staging-v02.api.letsencrypt.org/directory"},
		Want: Want{Refused: "caddy.tls.ca"}},
	{Name: "examples_route_strip_prefix", Source: "examples/standalone.yaml and distributed.yaml (echo_0)",
		Labels: map[string]string{"caddy": "echo0.example.com", "caddy.@match.path": "/sourcepath /sourcepath/*",
			"caddy.route": "@match", "caddy.route.0_uri": "strip_prefix /sourcepath", "caddy.route.1_rewrite": "* /targetpath{path}",
			"caddy.route.2_reverse_proxy": "{{upstreams 80}}", "caddy.tls": "internal"},
		Want: Want{Refused: "caddy.@match.path"}},
	{Name: "examples_controlled_server", Source: "examples/distributed.yaml (caddy_server)",
		Labels: map[string]string{"caddy_controlled_server": ""},
		Want:   Want{Refused: "caddy_controlled_server"}},
	{Name: "ingress_network", Source: "README.md, Template functions: upstreams (the caddy_ingress_network label)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams 3000}}", "caddy_ingress_network": "frontend"},
		Want:   Want{Hosts: []string{"a.example.com"}, Port: 3000, Network: "frontend"}},
	{Name: "two_sites_same_route", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy_0": "a.example.com", "caddy_0.reverse_proxy": "{{upstreams 80}}",
			"caddy_1": "b.example.com", "caddy_1.reverse_proxy": "{{upstreams 80}}"},
		Want: Want{Hosts: []string{"a.example.com", "b.example.com"}, Port: 80}},
	{Name: "two_sites_other_ports", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy_0": "a.example.com", "caddy_0.reverse_proxy": "{{upstreams 80}}",
			"caddy_1": "b.example.com", "caddy_1.reverse_proxy": "{{upstreams 81}}"},
		Want: Want{Refused: "caddy_1"}},
	{Name: "basic_auth", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basic_auth.admin": "$2a$14$hash"},
		Want:   Want{Refused: "caddy.basic_auth.admin"}},
	{Name: "basicauth_old_spelling", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basicauth": "/admin/*"},
		Want:   Want{Refused: "caddy.basicauth"}},
	{Name: "header", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.header.X-Frame-Options": "DENY"},
		Want:   Want{Refused: "caddy.header.X-Frame-Options"}},
	{Name: "reverse_proxy_option", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.reverse_proxy.health_uri": "/health"},
		Want:   Want{Refused: "caddy.reverse_proxy.health_uri"}},
	{Name: "address_with_scheme", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "http://a.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Refused: "caddy"}},
	{Name: "address_with_placeholder", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "{$DOMAIN}", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Refused: "caddy"}},
	{Name: "site_without_proxy", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com"},
		Want:   Want{Refused: "caddy"}},
	{Name: "handle_without_proxy", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.handle": "/x/*"},
		Want:   Want{Refused: "caddy.handle"}},
	{Name: "strip_and_whole_site", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}",
			"caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}"},
		Want: Want{Refused: "caddy.handle_path.0_reverse_proxy"}},
	{Name: "two_kept_prefixes", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "a.example.com",
			"caddy.handle_0": "/x/*", "caddy.handle_0.reverse_proxy": "{{upstreams}}",
			"caddy.handle_1": "/y*", "caddy.handle_1.reverse_proxy": "{{upstreams}}"},
		Want: Want{Hosts: []string{"a.example.com"}, Paths: []string{"/x", "/y"}, Port: 80}},
	{Name: "wildcard_host", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy": "*.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		Want:   Want{Hosts: []string{"*.example.com"}, Port: 80}},
	{Name: "only_our_labels", Source: "edge case beside the README (not in it)",
		Labels: map[string]string{"caddy.host": "a.example.com", "caddy.port": "80", "caddy.standby_after": "5m"},
		Want:   Want{None: true}},
}

var traefik = []Case{
	{Name: "doc_rule", Source: "reference/routing-configuration/other-providers/docker.md, Configuration Examples",
		Labels: map[string]string{"traefik.http.routers.my-container.rule": "Host(`example.com`)"},
		Want:   Want{Hosts: []string{"example.com"}}},
	{Name: "doc_rule_and_port", Source: "reference/routing-configuration/other-providers/docker.md, Specify a Custom Port",
		Labels: map[string]string{"traefik.http.routers.my-container.rule": "Host(`example.com`)",
			"traefik.http.services.my-service.loadbalancer.server.port": "12345"},
		Want: Want{Hosts: []string{"example.com"}, Port: 12345}},
	{Name: "doc_two_routers_two_ports", Source: "reference/routing-configuration/other-providers/docker.md, Specifying more than one router and service",
		Labels: map[string]string{
			"traefik.http.routers.www-router.rule": "Host(`example-a.com`)", "traefik.http.routers.www-router.service": "www-service",
			"traefik.http.services.www-service.loadbalancer.server.port": "8000",
			"traefik.http.routers.admin-router.rule":                     "Host(`example-b.com`)", "traefik.http.routers.admin-router.service": "admin-service",
			"traefik.http.services.admin-service.loadbalancer.server.port": "9000"},
		Want: Want{Refused: "traefik.http.routers.www-router.service"}},
	{Name: "doc_enable_network", Source: "reference/routing-configuration/other-providers/docker.md, traefik.docker.network",
		Labels: map[string]string{"traefik.enable": "true", "traefik.docker.network": "proxy",
			"traefik.http.routers.myproxy.rule": "Host(`example.net`)", "traefik.http.services.myservice.loadbalancer.server.port": "80"},
		Want: Want{Hosts: []string{"example.net"}, Port: 80, Network: "proxy"}},
	{Name: "doc_middleware_redirect", Source: "reference/routing-configuration/other-providers/docker.md, Middleware",
		Labels: map[string]string{"traefik.http.middlewares.my-redirect.redirectscheme.scheme": "https",
			"traefik.http.routers.my-container.middlewares": "my-redirect", "traefik.http.routers.my-container.rule": "Host(`example.com`)"},
		Want: Want{Refused: "traefik.http.middlewares.my-redirect.redirectscheme.scheme"}},
	{Name: "doc_tcp_router", Source: "reference/routing-configuration/other-providers/docker.md, TCP",
		Labels: map[string]string{"traefik.tcp.routers.my-router.rule": "HostSNI(`example.com`)", "traefik.tcp.routers.my-router.tls": "true",
			"traefik.tcp.services.my-service.loadbalancer.server.port": "4123"},
		Want: Want{Refused: "traefik.tcp.routers.my-router.rule"}},
	{Name: "doc_entrypoints_tls_certresolver", Source: "expose/docker/advanced.md, Let's Encrypt (whoami)",
		Labels: map[string]string{"traefik.enable": "true",
			"traefik.http.routers.whoami.rule": "Host(`whoami.example.com`)", "traefik.http.routers.whoami.entrypoints": "websecure",
			"traefik.http.routers.whoami.tls": "true", "traefik.http.routers.whoami.tls.certresolver": "le"},
		Want: Want{Hosts: []string{"whoami.example.com"}}},
	{Name: "doc_other_entrypoint", Source: "reference/routing-configuration/other-providers/docker.md, routers.<r>.entrypoints",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.entrypoints": "metrics"},
		Want:   Want{Refused: "traefik.http.routers.r.entrypoints"}},
	{Name: "doc_tls_domains", Source: "reference/routing-configuration/other-providers/docker.md, routers.<r>.tls.domains",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.tls.domains[0].main": "a.com"},
		Want:   Want{Refused: "traefik.http.routers.r.tls.domains[0].main"}},
	{Name: "doc_basic_auth", Source: "reference/routing-configuration/other-providers/docker.md, routers.<r>.middlewares",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.middlewares": "auth@file"},
		Want:   Want{Refused: "traefik.http.routers.r.middlewares"}},
	{Name: "doc_path_prefix", Source: "expose/docker/basic.md, Add a path prefix (whoami-api)",
		Labels: map[string]string{"traefik.http.routers.api.rule": "Host(`example.com`) && PathPrefix(`/api`)"},
		Want:   Want{Hosts: []string{"example.com"}, Paths: []string{"/api"}}},
	{Name: "hosts_or_with_prefix", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "(Host(`a.com`) || Host(`b.com`)) && PathPrefix(`/api`, `/v2/`)"},
		Want:   Want{Hosts: []string{"a.com", "b.com"}, Paths: []string{"/api", "/v2"}}},
	{Name: "v2_host_list", Source: "Traefik v2 rule syntax (ruleSyntax v2)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`, `b.com`)"},
		Want:   Want{Hosts: []string{"a.com", "b.com"}}},
	{Name: "not_a_product", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) || Host(`b.com`) && PathPrefix(`/api`)"},
		Want:   Want{Refused: "traefik.http.routers.r.rule"}},
	{Name: "host_regexp", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "HostRegexp(`^.+\\.example\\.com$`)"},
		Want:   Want{Refused: "traefik.http.routers.r.rule"}},
	{Name: "negation", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) && !PathPrefix(`/admin`)"},
		Want:   Want{Refused: "traefik.http.routers.r.rule"}},
	{Name: "path_only", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "PathPrefix(`/api`)"},
		Want:   Want{Refused: "traefik.http.routers.r.rule"}},
	{Name: "scheme_https", Source: "reference/routing-configuration/other-providers/docker.md, services.<s>.loadbalancer.server.scheme",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.server.scheme": "https"},
		Want:   Want{Refused: "traefik.http.services.s.loadbalancer.server.scheme"}},
	{Name: "scheme_http", Source: "reference/routing-configuration/other-providers/docker.md, services.<s>.loadbalancer.server.scheme",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.server.scheme": "http",
			"traefik.http.services.s.loadbalancer.server.port": "8080"},
		Want: Want{Hosts: []string{"a.com"}, Port: 8080}},
	{Name: "sticky", Source: "expose/docker/advanced.md, Sticky sessions",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.sticky.cookie": "true"},
		Want:   Want{Refused: "traefik.http.services.s.loadbalancer.sticky.cookie"}},
	{Name: "priority", Source: "reference/routing-configuration/other-providers/docker.md, routers.<r>.priority",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.priority": "42"},
		Want:   Want{Refused: "traefik.http.routers.r.priority"}},
	{Name: "disabled", Source: "reference/routing-configuration/other-providers/docker.md, traefik.enable",
		Labels: map[string]string{"traefik.enable": "false", "traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.middlewares": "x"},
		Want:   Want{None: true, Protected: "traefik.http.routers.r.middlewares"}},
	{Name: "no_router", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.enable": "true"},
		Want:   Want{Refused: "traefik.http.routers"}},
	{Name: "two_routers_same_port", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"traefik.http.routers.a.rule": "Host(`a.com`)", "traefik.http.routers.b.rule": "Host(`b.com`)",
			"traefik.http.services.s.loadbalancer.server.port": "80"},
		Want: Want{Hosts: []string{"a.com", "b.com"}, Port: 80}},
	{Name: "unknown_service", Source: "expose/docker/basic.md, dashboard (service api@internal)",
		Labels: map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.service": "api@internal"},
		Want:   Want{Refused: "traefik.http.routers.r.service"}},
	{Name: "none", Source: "edge case beside the docs (not in them)",
		Labels: map[string]string{"com.example": "x"},
		Want:   Want{None: true}},
	{Name: "expose_basic_whoami", Source: "expose/docker/basic.md, Expose a service (whoami)",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.whoami.rule": "Host(`whoami.docker.localhost`)",
			"traefik.http.routers.whoami.entrypoints": "web"},
		Want: Want{Hosts: []string{"whoami.docker.localhost"}}},
	{Name: "expose_basic_websecure", Source: "expose/docker/basic.md, Enable TLS (whoami)",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.whoami.rule": "Host(`whoami.docker.localhost`)",
			"traefik.http.routers.whoami.entrypoints": "websecure", "traefik.http.routers.whoami.tls": "true"},
		Want: Want{Hosts: []string{"whoami.docker.localhost"}}},
	{Name: "getting_started_whoami", Source: "getting-started/docker.md (whoami)",
		Labels: map[string]string{"traefik.http.routers.whoami.rule": "Host(`whoami.localhost`)"},
		Want:   Want{Hosts: []string{"whoami.localhost"}}},
	{Name: "expose_advanced_secure_headers", Source: "expose/docker/advanced.md, Middlewares (whoami)",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.whoami.rule": "Host(`whoami.docker.localhost`)",
			"traefik.http.routers.whoami.entrypoints":                              "web",
			"traefik.http.middlewares.secure-headers.headers.frameDeny":            "true",
			"traefik.http.middlewares.secure-headers.headers.sslRedirect":          "true",
			"traefik.http.middlewares.secure-headers.headers.browserXssFilter":     "true",
			"traefik.http.middlewares.secure-headers.headers.contentTypeNosniff":   "true",
			"traefik.http.middlewares.secure-headers.headers.stsIncludeSubdomains": "true",
			"traefik.http.middlewares.secure-headers.headers.stsPreload":           "true",
			"traefik.http.middlewares.secure-headers.headers.stsSeconds":           "31536000",
			"traefik.http.middlewares.ip-allowlist.ipallowlist.sourceRange":        "127.0.0.1/32,192.168.0.0/16,10.0.0.0/8",
			"traefik.http.routers.whoami.middlewares":                              "secure-headers,ip-allowlist"},
		Want: Want{Refused: "traefik.http.middlewares.ip-allowlist.ipallowlist.sourceRange"}},
	{Name: "expose_advanced_service_middleware", Source: "expose/docker/advanced.md, service-level middleware (whoami)",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.whoami.rule": "Host(`whoami.docker.localhost`)",
			"traefik.http.routers.whoami.entrypoints": "websecure", "traefik.http.routers.whoami.tls": "true",
			"traefik.http.middlewares.service-headers.headers.customRequestHeaders.X-Service-Middleware": "applied",
			"traefik.http.services.whoami.middlewares":                                                   "service-headers",
			"traefik.http.services.whoami.loadbalancer.server.port":                                      "80"},
		Want: Want{Refused: "traefik.http.middlewares.service-headers.headers.customRequestHeaders.X-Service-Middleware"}},
	{Name: "setup_dashboard_basicauth", Source: "setup/docker.md, the dashboard behind basicauth",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.dashboard.rule": "Host(`dashboard.docker.localhost`)",
			"traefik.http.routers.dashboard.entrypoints": "websecure", "traefik.http.routers.dashboard.service": "api@internal",
			"traefik.http.routers.dashboard.tls":                      "true",
			"traefik.http.middlewares.dashboard-auth.basicauth.users": "admin:$2y$05$hash",
			"traefik.http.routers.dashboard.middlewares":              "dashboard-auth@docker"},
		Want: Want{Refused: "traefik.http.middlewares.dashboard-auth.basicauth.users"}},
	{Name: "basicauth_middleware_own_service", Source: "setup/docker.md's basicauth on an app (not the dashboard)",
		Labels: map[string]string{"traefik.enable": "true", "traefik.http.routers.app.rule": "Host(`app.docker.localhost`)",
			"traefik.http.middlewares.app-auth.basicauth.users":  "admin:$2y$05$hash",
			"traefik.http.routers.app.middlewares":               "app-auth@docker",
			"traefik.http.services.app.loadbalancer.server.port": "80"},
		Want: Want{Refused: "traefik.http.middlewares.app-auth.basicauth.users"}},
}
