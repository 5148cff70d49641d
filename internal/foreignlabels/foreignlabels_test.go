package foreignlabels_test

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	fl "github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// want is a case's expected outcome: routed (host, path, port...) or
// refused (the label named).
type want struct {
	hosts, paths string // comma-joined
	strip        bool
	port         uint16
	network      string
	refused      string // the label a refusal names
	none         bool   // the set does not apply at all
}

type labelCase struct {
	name   string
	labels map[string]string
	want   want
}

func check(t *testing.T, c labelCase, got fl.Translated, r *fl.Refusal) {
	t.Helper()
	switch {
	case c.want.refused != "":
		if r == nil {
			t.Fatalf("routed %+v, want refused for %s", got, c.want.refused)
		}
		if r.Label != c.want.refused {
			t.Fatalf("refused for %q (%s), want %q", r.Label, r, c.want.refused)
		}
		return
	case r != nil:
		t.Fatalf("refused: %s", r)
	case c.want.none:
		if got.From != "" {
			t.Fatalf("translated %+v, want nothing", got)
		}
		return
	}
	if g := strings.Join(got.Hosts, ","); g != c.want.hosts {
		t.Errorf("hosts %q, want %q", g, c.want.hosts)
	}
	if g := strings.Join(got.Paths, ","); g != c.want.paths {
		t.Errorf("paths %q, want %q", g, c.want.paths)
	}
	if got.Strip != c.want.strip || got.Port != c.want.port || got.Network != c.want.network {
		t.Errorf("strip %v port %d network %q, want %v %d %q", got.Strip, got.Port, got.Network, c.want.strip, c.want.port, c.want.network)
	}
}

// The label sets of caddy-docker-proxy's README and examples/ (read
// 2026-12-07 from github.com/lucaslorentz/caddy-docker-proxy), each with
// what R2f makes of it.
var cdpCases = []labelCase{
	{"readme_whoami", map[string]string{"caddy": "whoami.example.com", "caddy.reverse_proxy": "{{upstreams 80}}"},
		want{hosts: "whoami.example.com", port: 80}},
	{"readme_respond", map[string]string{"caddy": "example.com", "caddy.respond": `"Hello World" 200`},
		want{refused: "caddy.respond"}},
	{"readme_snippet_encode", map[string]string{"caddy": "(encode)", "caddy.encode": "zstd gzip"},
		want{refused: "caddy.encode"}},
	{"readme_snippet_import", map[string]string{"caddy_0": "(snippet)", "caddy_0.tls": "internal",
		"caddy_1": "site-a.com", "caddy_1.import": "snippet", "caddy_2": "site-b.com", "caddy_2.import": "snippet"},
		want{refused: "caddy_0.tls"}},
	{"readme_global_email", map[string]string{"caddy.email": "you@example.com"},
		want{refused: "caddy.email"}},
	{"readme_matcher_localhost", map[string]string{"caddy": "localhost", "caddy.@match.path": "/api", "caddy.reverse_proxy": "@match localhost:6001"},
		want{refused: "caddy.@match.path"}},
	{"readme_template_respond", map[string]string{"caddy": "example.com", "caddy.respond": `/info "{{.Spec.Name}}"`},
		want{refused: "caddy.respond"}},
	{"readme_upstreams_bare", map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		want{hosts: "example.com", port: 80}},
	{"readme_upstreams_https", map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams https}}"},
		want{refused: "caddy.reverse_proxy"}},
	{"readme_upstreams_port", map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams 8080}}"},
		want{hosts: "example.com", port: 8080}},
	{"readme_upstreams_http_port", map[string]string{"caddy": "example.com", "caddy.reverse_proxy": "{{upstreams http 8080}}"},
		want{hosts: "example.com", port: 8080}},
	{"readme_rewrite", map[string]string{"caddy": "example.com", "caddy.rewrite": "* /target{path}", "caddy.reverse_proxy": "{{upstreams}}"},
		want{refused: "caddy.rewrite"}},
	{"readme_handle_keeps_prefix", map[string]string{"caddy": "example.com", "caddy.handle": "/source/*", "caddy.handle.0_reverse_proxy": "{{upstreams}}"},
		want{hosts: "example.com", paths: "/source", port: 80}},
	{"readme_handle_path_strips", map[string]string{"caddy": "example.com", "caddy.handle_path": "/source/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}"},
		want{hosts: "example.com", paths: "/source", strip: true, port: 80}},
	{"readme_handle_path_rewrite", map[string]string{"caddy": "example.com", "caddy.handle_path": "/source/*",
		"caddy.handle_path.0_rewrite": "* /target{uri}", "caddy.handle_path.1_reverse_proxy": "{{upstreams}}"},
		want{refused: "caddy.handle_path.0_rewrite"}},
	{"readme_websocket_matchers", map[string]string{"caddy": "example.com", "caddy.@ws.0_header": "Connection *Upgrade*",
		"caddy.@ws.1_header": "Upgrade websocket", "caddy.0_reverse_proxy": "@ws {{upstreams}}", "caddy.1_reverse_proxy": "/api* {{upstreams}}"},
		want{refused: "caddy.0_reverse_proxy"}},
	{"readme_multiple_domains", map[string]string{"caddy": "example.com, example.org, www.example.com, www.example.org", "caddy.reverse_proxy": "{{upstreams}}"},
		want{hosts: "example.com,example.org,www.example.com,www.example.org", port: 80}},
	{"readme_redir", map[string]string{"caddy": "example.com", "caddy.redir_0": "/favicon.ico  /alternative/icon.ico 302",
		"caddy.redir_1": "/photo.png    /updated-photo.png    302"},
		want{refused: "caddy.redir_0"}},
	{"readme_swarm_service", map[string]string{"caddy": "service.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		want{hosts: "service.example.com", port: 80}},
	{"readme_run_tls_internal", map[string]string{"caddy": "whoami0.example.com", "caddy.reverse_proxy": "{{upstreams 80}}", "caddy.tls": "internal"},
		want{refused: "caddy.tls"}},
	{"examples_tls_ca", map[string]string{"caddy": "whoami1.example.com", "caddy.reverse_proxy": "{{upstreams 80}}",
		"caddy.tls.ca": "https://acme-staging-v02.api.letsencrypt.org/directory"},
		want{refused: "caddy.tls.ca"}},
	{"examples_route_strip_prefix", map[string]string{"caddy": "echo0.example.com", "caddy.@match.path": "/sourcepath /sourcepath/*",
		"caddy.route": "@match", "caddy.route.0_uri": "strip_prefix /sourcepath", "caddy.route.1_rewrite": "* /targetpath{path}",
		"caddy.route.2_reverse_proxy": "{{upstreams 80}}", "caddy.tls": "internal"},
		want{refused: "caddy.@match.path"}},
	{"examples_controlled_server", map[string]string{"caddy_controlled_server": ""},
		want{refused: "caddy_controlled_server"}},
	{"ingress_network", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams 3000}}", "caddy_ingress_network": "frontend"},
		want{hosts: "a.example.com", port: 3000, network: "frontend"}},
	{"two_sites_same_route", map[string]string{"caddy_0": "a.example.com", "caddy_0.reverse_proxy": "{{upstreams 80}}",
		"caddy_1": "b.example.com", "caddy_1.reverse_proxy": "{{upstreams 80}}"},
		want{hosts: "a.example.com,b.example.com", port: 80}},
	{"two_sites_other_ports", map[string]string{"caddy_0": "a.example.com", "caddy_0.reverse_proxy": "{{upstreams 80}}",
		"caddy_1": "b.example.com", "caddy_1.reverse_proxy": "{{upstreams 81}}"},
		want{refused: "caddy_1"}},
	{"basic_auth", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basic_auth.admin": "$2a$14$hash"},
		want{refused: "caddy.basic_auth.admin"}},
	{"basicauth_old_spelling", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basicauth": "/admin/*"},
		want{refused: "caddy.basicauth"}},
	{"header", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.header.X-Frame-Options": "DENY"},
		want{refused: "caddy.header.X-Frame-Options"}},
	{"reverse_proxy_option", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.reverse_proxy.health_uri": "/health"},
		want{refused: "caddy.reverse_proxy.health_uri"}},
	{"address_with_scheme", map[string]string{"caddy": "http://a.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		want{refused: "caddy"}},
	{"address_with_placeholder", map[string]string{"caddy": "{$DOMAIN}", "caddy.reverse_proxy": "{{upstreams}}"},
		want{refused: "caddy"}},
	{"site_without_proxy", map[string]string{"caddy": "a.example.com"},
		want{refused: "caddy"}},
	{"handle_without_proxy", map[string]string{"caddy": "a.example.com", "caddy.handle": "/x/*"},
		want{refused: "caddy.handle"}},
	{"strip_and_whole_site", map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams}}",
		"caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}"},
		want{refused: "caddy.handle_path.0_reverse_proxy"}},
	{"two_kept_prefixes", map[string]string{"caddy": "a.example.com",
		"caddy.handle_0": "/x/*", "caddy.handle_0.reverse_proxy": "{{upstreams}}",
		"caddy.handle_1": "/y*", "caddy.handle_1.reverse_proxy": "{{upstreams}}"},
		want{hosts: "a.example.com", paths: "/x,/y", port: 80}},
	{"wildcard_host", map[string]string{"caddy": "*.example.com", "caddy.reverse_proxy": "{{upstreams}}"},
		want{hosts: "*.example.com", port: 80}},
	{"only_our_labels", map[string]string{"caddy.host": "a.example.com", "caddy.port": "80", "caddy.standby_after": "5m"},
		want{none: true}},
}

func TestCaddyDockerProxy_R2f_readme_and_examples(t *testing.T) {
	for _, c := range cdpCases {
		t.Run(c.name, func(t *testing.T) {
			got, r := fl.CaddyDockerProxy(c.labels)
			check(t, c, got, r)
		})
	}
}

// The label sets of Traefik's Docker provider documentation
// (docs/content/reference/routing-configuration/other-providers/docker.md
// and docs/content/expose/docker, read 2026-12-07), with R2f's outcome.
var traefikCases = []labelCase{
	{"doc_rule", map[string]string{"traefik.http.routers.my-container.rule": "Host(`example.com`)"},
		want{hosts: "example.com"}},
	{"doc_rule_and_port", map[string]string{"traefik.http.routers.my-container.rule": "Host(`example.com`)",
		"traefik.http.services.my-service.loadbalancer.server.port": "12345"},
		want{hosts: "example.com", port: 12345}},
	{"doc_two_routers_two_ports", map[string]string{
		"traefik.http.routers.www-router.rule": "Host(`example-a.com`)", "traefik.http.routers.www-router.service": "www-service",
		"traefik.http.services.www-service.loadbalancer.server.port": "8000",
		"traefik.http.routers.admin-router.rule":                     "Host(`example-b.com`)", "traefik.http.routers.admin-router.service": "admin-service",
		"traefik.http.services.admin-service.loadbalancer.server.port": "9000"},
		want{refused: "traefik.http.routers.www-router.service"}},
	{"doc_enable_network", map[string]string{"traefik.enable": "true", "traefik.docker.network": "proxy",
		"traefik.http.routers.myproxy.rule": "Host(`example.net`)", "traefik.http.services.myservice.loadbalancer.server.port": "80"},
		want{hosts: "example.net", port: 80, network: "proxy"}},
	{"doc_middleware_redirect", map[string]string{"traefik.http.middlewares.my-redirect.redirectscheme.scheme": "https",
		"traefik.http.routers.my-container.middlewares": "my-redirect", "traefik.http.routers.my-container.rule": "Host(`example.com`)"},
		want{refused: "traefik.http.middlewares.my-redirect.redirectscheme.scheme"}},
	{"doc_tcp_router", map[string]string{"traefik.tcp.routers.my-router.rule": "HostSNI(`example.com`)", "traefik.tcp.routers.my-router.tls": "true",
		"traefik.tcp.services.my-service.loadbalancer.server.port": "4123"},
		want{refused: "traefik.tcp.routers.my-router.rule"}},
	{"doc_entrypoints_tls_certresolver", map[string]string{"traefik.enable": "true",
		"traefik.http.routers.whoami.rule": "Host(`whoami.example.com`)", "traefik.http.routers.whoami.entrypoints": "websecure",
		"traefik.http.routers.whoami.tls": "true", "traefik.http.routers.whoami.tls.certresolver": "le"},
		want{hosts: "whoami.example.com"}},
	{"doc_other_entrypoint", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.entrypoints": "metrics"},
		want{refused: "traefik.http.routers.r.entrypoints"}},
	{"doc_tls_domains", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.tls.domains[0].main": "a.com"},
		want{refused: "traefik.http.routers.r.tls.domains[0].main"}},
	{"doc_basic_auth", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.middlewares": "auth@file"},
		want{refused: "traefik.http.routers.r.middlewares"}},
	{"doc_path_prefix", map[string]string{"traefik.http.routers.api.rule": "Host(`example.com`) && PathPrefix(`/api`)"},
		want{hosts: "example.com", paths: "/api"}},
	{"hosts_or_with_prefix", map[string]string{"traefik.http.routers.r.rule": "(Host(`a.com`) || Host(`b.com`)) && PathPrefix(`/api`, `/v2/`)"},
		want{hosts: "a.com,b.com", paths: "/api,/v2"}},
	{"v2_host_list", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`, `b.com`)"},
		want{hosts: "a.com,b.com"}},
	{"not_a_product", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) || Host(`b.com`) && PathPrefix(`/api`)"},
		want{refused: "traefik.http.routers.r.rule"}},
	{"host_regexp", map[string]string{"traefik.http.routers.r.rule": "HostRegexp(`^.+\\.example\\.com$`)"},
		want{refused: "traefik.http.routers.r.rule"}},
	{"negation", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) && !PathPrefix(`/admin`)"},
		want{refused: "traefik.http.routers.r.rule"}},
	{"path_only", map[string]string{"traefik.http.routers.r.rule": "PathPrefix(`/api`)"},
		want{refused: "traefik.http.routers.r.rule"}},
	{"scheme_https", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.server.scheme": "https"},
		want{refused: "traefik.http.services.s.loadbalancer.server.scheme"}},
	{"scheme_http", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.server.scheme": "http",
		"traefik.http.services.s.loadbalancer.server.port": "8080"},
		want{hosts: "a.com", port: 8080}},
	{"sticky", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.sticky.cookie": "true"},
		want{refused: "traefik.http.services.s.loadbalancer.sticky.cookie"}},
	{"priority", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.priority": "42"},
		want{refused: "traefik.http.routers.r.priority"}},
	{"disabled", map[string]string{"traefik.enable": "false", "traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.middlewares": "x"},
		want{none: true}},
	{"no_router", map[string]string{"traefik.enable": "true"},
		want{refused: "traefik.http.routers"}},
	{"two_routers_same_port", map[string]string{"traefik.http.routers.a.rule": "Host(`a.com`)", "traefik.http.routers.b.rule": "Host(`b.com`)",
		"traefik.http.services.s.loadbalancer.server.port": "80"},
		want{hosts: "a.com,b.com", port: 80}},
	{"unknown_service", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.service": "api@internal"},
		want{refused: "traefik.http.routers.r.service"}},
	{"none", map[string]string{"com.example": "x"}, want{none: true}},
}

func TestTraefik_R2f_docker_provider_examples(t *testing.T) {
	for _, c := range traefikCases {
		t.Run(c.name, func(t *testing.T) {
			got, r := fl.Traefik(c.labels)
			check(t, c, got, r)
		})
	}
}

func TestApply_R2f_labels_the_catalog_reads(t *testing.T) {
	both := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	cases := []struct {
		name   string
		sets   fl.Set
		labels map[string]string
		want   map[string]string // the keys checked; "" absent
	}{
		{"default_reads_no_foreign_set", fl.SetCaddyDicer,
			map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}"},
			map[string]string{"caddy.host": "", catalog.LabelRefused: ""}},
		{"cdp_routes", both,
			map[string]string{"caddy": "a.com", "caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams 8080}}", "caddy.standby_after": "5m"},
			map[string]string{"caddy.host": "a.com", "caddy.path": "/x", "caddy.port": "8080", "caddy.standby_after": "5m"}},
		{"refused_drops_own_host", both,
			map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basic_auth.u": "h", "caddy.host": "a.com"},
			map[string]string{"caddy.host": "", "caddy.path": ""}},
		{"own_host_beside_cdp", both,
			map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.host": "b.com"},
			map[string]string{"caddy.host": ""}},
		{"two_sets", both,
			map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}", "traefik.http.routers.r.rule": "Host(`a.com`)"},
			map[string]string{"caddy.host": ""}},
		{"traefik_only_when_read", fl.SetCaddyDicer | fl.SetCaddyDockerProxy,
			map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)"},
			map[string]string{"caddy.host": "", catalog.LabelRefused: ""}},
		{"forged_refusal_dropped", fl.SetCaddyDicer,
			map[string]string{catalog.LabelRefused: "x", "caddy.host": "a.com"},
			map[string]string{catalog.LabelRefused: "", "caddy.host": "a.com"}},
		{"own_port_conflict", both,
			map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.services.s.loadbalancer.server.port": "81", "caddy.port": "80"},
			map[string]string{"caddy.host": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := maps.Clone(c.labels)
			out := fl.Apply(c.sets, c.labels)
			if !maps.Equal(in, c.labels) {
				t.Fatal("Apply changed its argument")
			}
			for k, v := range c.want {
				if out[k] != v {
					t.Errorf("%s = %q, want %q (refused: %q)", k, out[k], v, out[catalog.LabelRefused])
				}
			}
			refusedWanted := strings.HasPrefix(c.name, "refused") || c.name == "own_host_beside_cdp" || c.name == "two_sets" || c.name == "own_port_conflict"
			if _, refused := out[catalog.LabelRefused]; refused != refusedWanted {
				t.Errorf("refused %v (%q), want %v", refused, out[catalog.LabelRefused], refusedWanted)
			}
		})
	}
}

func TestRefusal_R2f_escapes_tenant_text(t *testing.T) {
	labels := map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}",
		"caddy.header.\x1b[31mred\nforged=1": strings.Repeat("v", 3000) + "\n\x00"}
	_, r := fl.CaddyDockerProxy(labels)
	if r == nil {
		t.Fatal("not refused")
	}
	s := r.String()
	if strings.ContainsAny(s, "\n\x1b\x00") || len(s) > 1000 {
		t.Fatalf("refusal not escaped or clipped: %d bytes %q", len(s), s)
	}
	// basic_auth's values (password hashes) are never shown.
	_, r = fl.CaddyDockerProxy(map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}", "caddy.basic_auth.admin": "$2a$14$secrethash"})
	if r == nil || strings.Contains(r.String(), "secrethash") {
		t.Fatalf("basic_auth refusal shows the hash: %v", r)
	}
}

// A hostile tenant's labels: huge, many, nested. Each is refused, in
// bounded time (no test timing: the work is linear by construction, the
// test checks the outcome).
func TestApply_R2f_hostile_labels(t *testing.T) {
	sets := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	many := map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}"}
	for i := range 5000 {
		many["caddy_"+strconv.Itoa(i)] = "h" + strconv.Itoa(i) + ".com"
	}
	nested := map[string]string{"traefik.http.routers.r.rule": strings.Repeat("(", 500) + "Host(`a.com`)" + strings.Repeat(")", 500)}
	blowup := map[string]string{"traefik.http.routers.r.rule": strings.Repeat("(Host(`a.com`) || Host(`b.com`)) && ", 10) + "PathPrefix(`/x`)"}
	bigValue := map[string]string{"caddy": strings.Repeat("a", 1<<20), "caddy.reverse_proxy": "{{upstreams}}"}
	manyHosts := map[string]string{"caddy.reverse_proxy": "{{upstreams}}"}
	var hs []string
	for i := range 101 {
		hs = append(hs, "h"+strconv.Itoa(i)+".com")
	}
	manyHosts["caddy"] = strings.Join(hs, " ")
	badUTF8 := map[string]string{"caddy": "a.com\xff", "caddy.reverse_proxy": "{{upstreams}}"}
	manyOversized := map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}"}
	for i := range 50 {
		manyOversized["caddy.header.x"+strconv.Itoa(i)] = strings.Repeat("v", fl.MaxValueBytes+1)
	}
	injected := map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`)", "traefik.http.routers.r.\x1b[2J\nlevel=error": "x"}
	for name, labels := range map[string]map[string]string{"many_sites": many, "nested": nested, "blowup": blowup,
		"big_value": bigValue, "many_hosts": manyHosts, "bad_utf8": badUTF8, "many_oversized": manyOversized, "injected": injected} {
		out := fl.Apply(sets, labels)
		if out[catalog.LabelRefused] == "" || out[catalog.LabelHost] != "" {
			t.Errorf("%s: not refused: host %q", name, catalog.ClipLabel(out[catalog.LabelHost]))
		}
		if strings.ContainsAny(out[catalog.LabelRefused], "\n\x1b") {
			t.Errorf("%s: refusal not escaped: %q", name, out[catalog.LabelRefused])
		}
		// The same labels, the same refusal, whatever the map's order: a
		// re-listing warns no more (the catalog warns on a change).
		for range 20 {
			if again := fl.Apply(sets, labels); again[catalog.LabelRefused] != out[catalog.LabelRefused] {
				t.Fatalf("%s: refusal changed: %q then %q", name, out[catalog.LabelRefused], again[catalog.LabelRefused])
			}
		}
	}
}

func FuzzApply(f *testing.F) {
	for _, c := range append(append([]labelCase{}, cdpCases...), traefikCases...) {
		for k, v := range c.labels {
			f.Add(k, v, "caddy", "a.com")
		}
	}
	sets := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		out := fl.Apply(sets, map[string]string{k1: v1, k2: v2, "caddy.reverse_proxy": "{{upstreams}}", "traefik.http.routers.r.rule": v2})
		if r, ok := out[catalog.LabelRefused]; ok {
			if out[catalog.LabelHost] != "" || out[catalog.LabelPath] != "" {
				t.Fatal("a refused instance keeps a host or path")
			}
			if !utf8.ValidString(r) || strings.ContainsAny(r, "\n\r\x1b") || len(r) > 2000 {
				t.Fatalf("refusal not escaped: %q", r)
			}
			return
		}
		if h := out[catalog.LabelHost]; h != "" {
			for _, x := range strings.Split(h, ",") {
				if x == "" || strings.ContainsAny(x, " {}/:") {
					t.Fatalf("routed host %q", x)
				}
			}
		}
	})
}

// The translation says, per instance, whether its prefix is stripped
// (caddy.strip_path, R2d): handle_path strips, handle and Traefik's
// PathPrefix keep it, whatever the source's strip_path_prefix; a
// tenant's own caddy.strip_path saying otherwise is refused.
func TestApply_R2d_strip_path_per_instance(t *testing.T) {
	sets := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	cases := []struct {
		name     string
		labels   map[string]string
		strip    string // caddy.strip_path wanted, "" absent
		refusing string // the label a refusal names, "" routed
	}{
		{"handle_path_strips", map[string]string{"caddy": "a.com", "caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}"}, "true", ""},
		{"handle_keeps", map[string]string{"caddy": "a.com", "caddy.handle": "/x/*", "caddy.handle.0_reverse_proxy": "{{upstreams}}"}, "false", ""},
		{"traefik_pathprefix_keeps", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) && PathPrefix(`/x`)"}, "false", ""},
		{"whole_site_says_nothing", map[string]string{"caddy": "a.com", "caddy.reverse_proxy": "{{upstreams}}"}, "", ""},
		{"own_label_agreeing", map[string]string{"caddy": "a.com", "caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}", "caddy.strip_path": "TRUE"}, "true", ""},
		{"own_label_contradicting_handle", map[string]string{"caddy": "a.com", "caddy.handle": "/x/*", "caddy.handle.0_reverse_proxy": "{{upstreams}}", "caddy.strip_path": "true"}, "", catalog.LabelStripPath},
		{"handle_path_stripping_another_prefix", map[string]string{"caddy": "a.com", "caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}", "caddy.handle_path.1_uri": "strip_prefix /admin"}, "", "caddy.handle_path.1_uri"},
		{"own_label_naming_a_prefix", map[string]string{"caddy": "a.com", "caddy.handle_path": "/x/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams}}", "caddy.strip_path": "/admin"}, "", catalog.LabelStripPath},
		{"own_label_contradicting_traefik", map[string]string{"traefik.http.routers.r.rule": "Host(`a.com`) && PathPrefix(`/x`)", "caddy.strip_path": "yes"}, "", catalog.LabelStripPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := fl.Apply(sets, c.labels)
			why, refused := out[catalog.LabelRefused]
			switch {
			case c.refusing != "":
				if !refused || !strings.Contains(why, strconv.QuoteToASCII(c.refusing)) {
					t.Fatalf("refused %v %q, want a refusal naming %s", refused, why, c.refusing)
				}
				return
			case refused:
				t.Fatalf("refused: %s", why)
			}
			if got, ok := out[catalog.LabelStripPath]; c.strip == "" && ok || c.strip != "" && got != c.strip && !strings.EqualFold(got, c.strip) {
				t.Fatalf("caddy.strip_path = %q (present %v), want %q", got, ok, c.strip)
			}
		})
	}
}
