package foreignlabels_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	fl "github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels/labelsets"
)

// check asserts the translation of one case of labelsets.
func check(t *testing.T, c labelsets.Case, got fl.Translated, r *fl.Refusal) {
	t.Helper()
	switch {
	case c.Want.Refused != "":
		if r == nil {
			t.Fatalf("routed %+v, want refused for %s", got, c.Want.Refused)
		}
		if r.Label != c.Want.Refused {
			t.Fatalf("refused for %q (%s), want %q", r.Label, r, c.Want.Refused)
		}
		return
	case r != nil:
		t.Fatalf("refused: %s", r)
	case c.Want.None:
		if got.From != "" {
			t.Fatalf("translated %+v, want nothing", got)
		}
		if p := fl.Protection(c.Labels); c.Want.Protected != "" && (p == nil || p.Label != c.Want.Protected) || c.Want.Protected == "" && p != nil {
			t.Fatalf("protection %v, want %q", p, c.Want.Protected)
		}
		return
	}
	if !slices.Equal(got.Hosts, c.Want.Hosts) {
		t.Errorf("hosts %q, want %q", got.Hosts, c.Want.Hosts)
	}
	if !slices.Equal(got.Paths, c.Want.Paths) {
		t.Errorf("paths %q, want %q", got.Paths, c.Want.Paths)
	}
	if got.Strip != c.Want.Strip || got.Port != c.Want.Port || got.Network != c.Want.Network {
		t.Errorf("strip %v port %d network %q, want %v %d %q", got.Strip, got.Port, got.Network, c.Want.Strip, c.Want.Port, c.Want.Network)
	}
}

// The label sets of caddy-docker-proxy's README and examples/ and of
// Traefik's Docker provider documentation, with what R2f makes of each,
// are in package labelsets, which the Engine tests share.

func TestCaddyDockerProxy_R2f_readme_and_examples(t *testing.T) {
	for _, c := range labelsets.CaddyDockerProxy() {
		t.Run(c.Name, func(t *testing.T) {
			got, r := fl.CaddyDockerProxy(c.Labels)
			check(t, c, got, r)
		})
	}
}

func TestTraefik_R2f_docker_provider_examples(t *testing.T) {
	for _, c := range labelsets.Traefik() {
		t.Run(c.Name, func(t *testing.T) {
			got, r := fl.Traefik(c.Labels)
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
	for _, c := range append(labelsets.CaddyDockerProxy(), labelsets.Traefik()...) {
		for k, v := range c.Labels {
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
