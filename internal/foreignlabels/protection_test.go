package foreignlabels_test

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	fl "github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// R2f, review finding: under the default `labels caddy-dicer` (and under
// any sets that do not read them), a container a source selects by its
// own labels (`dynamic docker app=shop`) or that carries caddy.host, and
// that also carries caddy-docker-proxy or Traefik protection labels, is
// not routed: it would serve its site with that protection skipped. The
// refusal names the label, never its value. With skip-foreign-protections
// it is routed by the labels read; labels that protect nothing (a site
// address, a reverse_proxy, traefik.enable) refuse nothing.
func TestApply_R2f_protection_refused_under_every_set(t *testing.T) {
	own := func(extra map[string]string) map[string]string {
		l := map[string]string{"app": "shop", catalog.LabelPort: "8080"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	protected := map[string]map[string]string{
		"cdp basic_auth":              own(map[string]string{"caddy": "shop.example.com", "caddy.basic_auth.admin": "$2a$14$secrethash"}),
		"cdp basicauth in handle":     own(map[string]string{"caddy.handle_path.1_basicauth.admin": "$2a$14$secrethash"}),
		"cdp forward_auth":            own(map[string]string{"caddy.forward_auth": "authelia:9091", "caddy.forward_auth.uri": "/api/verify"}),
		"cdp ordered, isolated":       own(map[string]string{"caddy_12.0_forward_auth_1": "authelia:9091"}),
		"cdp site of long number":     own(map[string]string{"caddy_00001.basic_auth.u": "h"}),
		"cdp remote_ip matcher key":   own(map[string]string{"caddy.@denied.not_0.remote_ip": "10.0.0.0/8"}),
		"cdp client_ip matcher value": own(map[string]string{"caddy.@inside": "client_ip 10.0.0.0/8"}),
		"cdp tls client_auth":         own(map[string]string{"caddy.tls.client_auth.mode": "require_and_verify"}),
		"cdp import":                  own(map[string]string{"caddy.import": "auth"}),
		"with caddy.host":             own(map[string]string{catalog.LabelHost: "shop.example.com", "caddy.basic_auth.u": "h"}),
		"traefik middlewares":         own(map[string]string{"traefik.http.routers.r.middlewares": "auth@file"}),
		"traefik middlewares, case":   own(map[string]string{"Traefik.HTTP.Routers.r.Middlewares": "auth@file"}),
		"traefik tcp middlewares":     own(map[string]string{"traefik.tcp.routers.r.middlewares": "allow@file"}),
		"traefik tls options":         own(map[string]string{"traefik.http.routers.r.tls.options": "mtls@file"}),
		"traefik ClientIP rule":       own(map[string]string{"traefik.http.routers.r.rule": "Host(`shop.example.com`) && clientIP(`10.0.0.0/8`)"}),
	}
	for _, sets := range []fl.Set{fl.SetCaddyDicer, fl.SetCaddyDicer | fl.SetCaddyDockerProxy, fl.SetCaddyDicer | fl.SetTraefik} {
		for name, labels := range protected {
			out := fl.Apply(sets, labels)
			why := out[catalog.LabelRefused]
			if why == "" || out[catalog.LabelHost] != "" {
				t.Errorf("labels %v, %s: routed (caddy.host %q), not refused", sets.Words(), name, out[catalog.LabelHost])
				continue
			}
			if strings.Contains(why, "secrethash") {
				t.Errorf("%s: the refusal shows the credential: %s", name, why)
			}
			if sets == fl.SetCaddyDicer && !strings.Contains(why, fl.NameSkipProtections) {
				t.Errorf("%s: the refusal does not name the opt-out: %s", name, why)
			}
			if out["app"] != "shop" {
				t.Errorf("%s: the refusal dropped the selector's label", name)
			}
		}
	}
	// The opt-out: routed by caddy-dicer's labels, the protection skipped.
	for name, labels := range protected {
		out := fl.Apply(fl.SetCaddyDicer|fl.SetSkipProtections, labels)
		if _, ok := out[catalog.LabelRefused]; ok {
			t.Errorf("skip-foreign-protections, %s: refused: %s", name, out[catalog.LabelRefused])
		}
	}
	// A read set still refuses its own protections, opt-out or not.
	out := fl.Apply(fl.SetCaddyDicer|fl.SetCaddyDockerProxy|fl.SetSkipProtections,
		map[string]string{"caddy": "a.example.com", "caddy.reverse_proxy": "{{upstreams 8080}}", "caddy.basic_auth.u": "h"})
	if out[catalog.LabelRefused] == "" {
		t.Error("skip-foreign-protections routed a read set's basic_auth")
	}
	// Nothing protective: not refused under the default set.
	for name, labels := range map[string]map[string]string{
		"cdp site and proxy":                   own(map[string]string{"caddy": "shop.example.com", "caddy.reverse_proxy": "{{upstreams 8080}}"}),
		"cdp header":                           own(map[string]string{"caddy.encode": "gzip"}),
		"traefik routing":                      own(map[string]string{"traefik.enable": "true", "traefik.http.routers.r.rule": "Host(`shop.example.com`)"}),
		"traefik middleware defined, not used": own(map[string]string{"traefik.http.middlewares.m.basicauth.users": "u:x"}),
		"caddy-dicer own":                      own(map[string]string{catalog.LabelHost: "shop.example.com", catalog.LabelStandbyAfter: "1m"}),
	} {
		if out := fl.Apply(fl.SetCaddyDicer, labels); out[catalog.LabelRefused] != "" {
			t.Errorf("%s: refused under caddy-dicer: %s", name, out[catalog.LabelRefused])
		}
	}
}

// R2f: the refusal is the same whatever the map's order (the first
// protection label in key order), so a re-listing warns no more.
func TestProtection_R2f_same_refusal_whatever_the_order(t *testing.T) {
	labels := map[string]string{"caddy.basic_auth.u": "h", "caddy.forward_auth": "x", "traefik.http.routers.r.middlewares": "m", "caddy_2.import": "s"}
	first := fl.Protection(labels)
	if first == nil || first.Label != "caddy.basic_auth.u" {
		t.Fatalf("Protection = %v, want caddy.basic_auth.u", first)
	}
	for range 50 {
		if r := fl.Protection(labels); r.String() != first.String() {
			t.Fatalf("Protection = %q, then %q", first, r)
		}
	}
	if fl.Protection(map[string]string{"app": "x"}) != nil {
		t.Error("Protection of labels without any")
	}
}
