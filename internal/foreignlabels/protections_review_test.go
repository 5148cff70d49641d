package foreignlabels_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	fl "github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// R2f, a hostile tenant (review s48): a label set that carries a
// protection (basic_auth, forward_auth, header, an IP allow-list through
// a remote_ip or ClientIP matcher, Traefik middlewares: ipallowlist,
// ipwhitelist, basicauth, forwardauth on a router) beside labels that
// would route the container is refused: the container serves no host.
// Spellings tried: ordering prefixes and isolating suffixes, nesting in
// handle and handle_path, numbered sites, matchers, snippets, keys in
// another case that Traefik itself still reads (its label decoder matches
// the `traefik.http` filter and the field names case-insensitively).
func TestApply_R2f_protection_never_routed(t *testing.T) {
	sets := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	cdp := func(extra map[string]string) map[string]string {
		l := map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams 8080}}"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	cdpPath := func(extra map[string]string) map[string]string {
		l := map[string]string{"caddy": "a.example.com", "caddy.handle_path": "/api/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams 8080}}"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	tr := func(extra map[string]string) map[string]string {
		l := map[string]string{"traefik.enable": "true", "traefik.http.routers.r.rule": "Host(`a.example.com`)",
			"traefik.http.services.s.loadbalancer.server.port": "8080"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	for name, labels := range map[string]map[string]string{
		"cdp basic_auth":                  cdp(map[string]string{"caddy.basic_auth.admin": "$2a$14$hash"}),
		"cdp basicauth":                   cdp(map[string]string{"caddy.basicauth.admin": "$2a$14$hash"}),
		"cdp ordered basic_auth":          cdp(map[string]string{"caddy.0_basic_auth.admin": "$2a$14$hash"}),
		"cdp isolated basic_auth":         cdp(map[string]string{"caddy.basic_auth_1.admin": "$2a$14$hash"}),
		"cdp basic_auth with a matcher":   cdp(map[string]string{"caddy.basic_auth": "/admin/*", "caddy.basic_auth.admin": "$2a$14$hash"}),
		"cdp forward_auth":                cdp(map[string]string{"caddy.forward_auth": "authelia:9091", "caddy.forward_auth.uri": "/api/verify"}),
		"cdp header":                      cdp(map[string]string{"caddy.header.Strict-Transport-Security": "max-age=31536000"}),
		"cdp remote_ip matcher":           cdp(map[string]string{"caddy.@denied.not_0.remote_ip": "10.0.0.0/8", "caddy.abort": "@denied"}),
		"cdp client_ip matcher":           cdp(map[string]string{"caddy.@denied.not.client_ip": "10.0.0.0/8", "caddy.respond": "@denied 403"}),
		"cdp proxy behind a matcher":      cdp(map[string]string{"caddy.@internal.remote_ip": "10.0.0.0/8", "caddy.reverse_proxy": "@internal {{upstreams 8080}}"}),
		"cdp basic_auth in handle_path":   cdpPath(map[string]string{"caddy.handle_path.1_basic_auth.admin": "$2a$14$hash"}),
		"cdp basic_auth in handle_path_0": cdpPath(map[string]string{"caddy.handle_path.basic_auth_0.admin": "$2a$14$hash"}),
		"cdp route with basic_auth":       cdp(map[string]string{"caddy.route.basic_auth.admin": "$2a$14$hash"}),
		"cdp second site basic_auth":      cdp(map[string]string{"caddy_1": "a.example.com", "caddy_1.basic_auth.admin": "$2a$14$hash"}),
		"cdp site of long number":         cdp(map[string]string{"caddy_00001.basic_auth.admin": "$2a$14$hash"}),
		"cdp import of a snippet":         cdp(map[string]string{"caddy.import": "auth"}),
		"cdp empty segment":               cdp(map[string]string{"caddy..basic_auth": "x"}),
		"cdp reverse_proxy header_up":     cdp(map[string]string{"caddy.reverse_proxy.header_up": "X-Auth secret"}),
		"cdp tls client auth":             cdp(map[string]string{"caddy.tls.client_auth.mode": "require_and_verify"}),

		"traefik middlewares":                tr(map[string]string{"traefik.http.routers.r.middlewares": "auth@file"}),
		"traefik middlewares, case":          tr(map[string]string{"traefik.http.routers.r.Middlewares": "auth@file"}),
		"traefik ipallowlist":                tr(map[string]string{"traefik.http.middlewares.m.ipallowlist.sourcerange": "10.0.0.0/8", "traefik.http.routers.r.middlewares": "m"}),
		"traefik ipwhitelist":                tr(map[string]string{"traefik.http.middlewares.m.ipwhitelist.sourcerange": "10.0.0.0/8", "traefik.http.routers.r.middlewares": "m"}),
		"traefik basicauth":                  tr(map[string]string{"traefik.http.middlewares.m.basicauth.users": "u:$apr1$x", "traefik.http.routers.r.middlewares": "m@docker"}),
		"traefik forwardauth":                tr(map[string]string{"traefik.http.middlewares.m.forwardauth.address": "http://auth", "traefik.http.routers.r.middlewares": "m"}),
		"traefik headers":                    tr(map[string]string{"traefik.http.middlewares.m.headers.stsseconds": "31536000", "traefik.http.routers.r.middlewares": "m"}),
		"traefik middleware only defined":    tr(map[string]string{"traefik.http.middlewares.m.basicauth.users": "u:$apr1$x"}),
		"traefik ClientIP in the rule":       tr(map[string]string{"traefik.http.routers.r.rule": "Host(`a.example.com`) && ClientIP(`10.0.0.0/8`)"}),
		"traefik negated ClientIP":           tr(map[string]string{"traefik.http.routers.r.rule": "Host(`a.example.com`) && !ClientIP(`1.2.3.4`)"}),
		"traefik HTTP in another case":       tr(map[string]string{"traefik.HTTP.routers.r.middlewares": "auth@file"}),
		"traefik root in another case":       tr(map[string]string{"Traefik.http.routers.r.middlewares": "auth@file"}),
		"traefik root in upper case":         tr(map[string]string{"TRAEFIK.http.middlewares.m.ipallowlist.sourcerange": "10.0.0.0/8", "traefik.http.routers.r.middlewares": "m"}),
		"traefik second router with auth":    tr(map[string]string{"traefik.http.routers.r2.rule": "Host(`a.example.com`)", "traefik.http.routers.r2.middlewares": "auth"}),
		"traefik tls options (mTLS)":         tr(map[string]string{"traefik.http.routers.r.tls.options": "mtls@file"}),
		"traefik enable in another case":     tr(map[string]string{"traefik.Enable": "true", "traefik.http.routers.r.middlewares": "auth"}),
		"traefik plus caddy.host":            tr(map[string]string{catalog.LabelHost: "a.example.com", "traefik.http.routers.r.middlewares": "auth"}),
		"both sets, protection on cdp":       tr(map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams 8080}}", "caddy.basic_auth.u": "h"}),
		"both sets, protection on traefik":   cdp(map[string]string{"traefik.http.routers.r.rule": "Host(`a.example.com`)", "traefik.http.routers.r.middlewares": "auth"}),
		"forged refusal label removed first": cdp(map[string]string{catalog.LabelRefused: "", "caddy.basic_auth.u": "h"}),
	} {
		out := fl.Apply(sets, labels)
		if out[catalog.LabelRefused] == "" || out[catalog.LabelHost] != "" || out[catalog.LabelPath] != "" {
			t.Errorf("%s: routed (caddy.host %q, caddy.path %q), not refused", name, out[catalog.LabelHost], out[catalog.LabelPath])
		}
	}
}
