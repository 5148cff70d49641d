package caddydicer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// Syntactically valid Dicer tokens (dicer-api.md §3): a generated secret is
// 52 characters of base32 (a-z, 2-7); the fingerprint is 64 lowercase hex.
const (
	cfSecret      = "izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq"
	cfFingerprint = "8b7f3a37a5cc5474ebeaa9e78f6ea463ca321c661ed6eb909dd63fdad31eebbd"
	cfToken       = "dicer_" + cfSecret + "_" + cfFingerprint
	cfTokenNoFP   = "dicer_" + cfSecret
)

// cfGoldenSeparator splits a .caddyfiletest file into its Caddyfile and the
// JSON the caddyfile adapter must produce, as in Caddy's own
// caddytest/integration/caddyfile_adapt.
const cfGoldenSeparator = "\n----------\n"

// TestCaddyfileAdapt adapts each testdata/caddyfile/*.caddyfiletest (R10)
// and compares the result with the JSON frozen in the file.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/caddyfile/*.caddyfiletest files")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".caddyfiletest")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.ReplaceAll(string(data), "\r\n", "\n")
			cfgText, want, ok := strings.Cut(text, cfGoldenSeparator)
			if !ok {
				t.Fatalf("%s: no %q line between the Caddyfile and the JSON", file, strings.TrimSpace(cfGoldenSeparator))
			}
			cfgText = strings.TrimSpace(cfgText) + "\n"
			want = strings.TrimSpace(want)
			if !caddytest.CompareAdapt(t, file, cfgText, "caddyfile", want) {
				t.Errorf("%s: the adapted JSON differs from the golden JSON (diff above)", file)
			}
			cfCheckModulesDecode(t, []byte(want))
		})
	}
}

// cfCheckModulesDecode finds every module object of a backend (and of
// permission daemons) in an adapted config and decodes it strictly into
// its Go type, as Caddy does when it loads the config: a key the struct
// does not know (a typo'd JSON tag) is an error.
func cfCheckModulesDecode(t *testing.T, adapted []byte) {
	t.Helper()
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatalf("golden JSON: %v", err)
	}
	found := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				obj, isObj := child.(map[string]any)
				if list, ok := child.([]any); ok && (k == "sources" || k == "daemons") {
					// dynamic multi's sources, permission daemons' daemons
					for _, elem := range list {
						walk(map[string]any{map[string]string{"sources": "dynamic_upstreams", "daemons": "permission"}[k]: elem})
					}
					continue
				}
				switch {
				case isObj && k == "permission" && obj["module"] == "daemons":
					found++
					cfStrictDecode(t, obj, "module", new(DaemonsPermission))
				case isObj && k == "dynamic_upstreams":
					found += cfDecodeBackend(t, obj, "source", diceradmin.UpstreamsNamespace)
				case isObj && k == "permission":
					found += cfDecodeBackend(t, obj, "module", diceradmin.PermissionNamespace)
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(cfg)
	if found == 0 {
		t.Error(`golden JSON holds no "dynamic_upstreams":{"source":"dicer"} nor "permission":{"module":"dicer"}`)
	}
}

// cfDecodeBackend decodes obj strictly into the module of a backend in
// namespace that its inlineKey names, and counts it; 0 when it names none.
func cfDecodeBackend(t *testing.T, obj map[string]any, inlineKey, namespace string) int {
	t.Helper()
	name, _ := obj[inlineKey].(string)
	if !slices.Contains(diceradmin.Kinds(namespace), name) {
		return 0
	}
	info, err := caddy.GetModule(namespace + "." + name)
	if err != nil {
		t.Fatal(err)
	}
	cfStrictDecode(t, obj, inlineKey, info.New())
	return 1
}

func cfStrictDecode(t *testing.T, obj map[string]any, inlineKey string, into any) {
	t.Helper()
	fields := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != inlineKey {
			fields[k] = v
		}
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.StrictUnmarshalJSON(raw, into); err != nil {
		t.Errorf("%s does not decode into %T: %v", raw, into, err)
	}
}

// TestCaddyfileAdaptShape pins the JSON field names of R10 independently of
// the golden files' formatting.
func TestCaddyfileAdaptShape(t *testing.T) {
	src := `{
	on_demand_tls {
		permission dicer {
			address 192.0.2.10:7443
			token ` + cfTokenNoFP + `
			tls {
				ca /etc/caddy/dicer-ca.pem
				server_name dicer.example
			}
		}
	}
}

https:// {
	tls {
		on_demand
	}
	reverse_proxy {
		dynamic dicer "tier in (frontend,edge)" 8080 {
			address 192.0.2.10:7443
			token ` + cfToken + `
			published_port_host 10.0.0.5
		}
	}
}
`
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []struct {
							DynamicUpstreams map[string]any `json:"dynamic_upstreams"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
			TLS struct {
				Automation struct {
					OnDemand struct {
						Permission map[string]any `json:"permission"`
					} `json:"on_demand"`
				} `json:"automation"`
			} `json:"tls"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	up := cfg.Apps.HTTP.Servers["srv0"].Routes[0].Handle[0].DynamicUpstreams
	wantUp := map[string]any{
		"source":              "dicer",
		"selector":            "tier in (frontend,edge)",
		"port":                float64(8080),
		"address":             "192.0.2.10:7443",
		"token":               cfToken,
		"published_port_host": "10.0.0.5",
	}
	cfAssertJSONObject(t, "dynamic_upstreams", up, wantUp)
	perm := cfg.Apps.TLS.Automation.OnDemand.Permission
	wantPerm := map[string]any{
		"module":  "dicer",
		"address": "192.0.2.10:7443",
		"token":   cfTokenNoFP,
		"tls":     map[string]any{"ca": "/etc/caddy/dicer-ca.pem", "server_name": "dicer.example"},
	}
	cfAssertJSONObject(t, "on_demand.permission", perm, wantPerm)
}

func cfAssertJSONObject(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) { // json.Marshal sorts map keys
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// caddyfileErrorCase is one Caddyfile that must be refused with an error
// that names the setting at fault.
type caddyfileErrorCase struct {
	name string
	// module is "upstreams" (input starts at `dicer` as in `dynamic dicer`),
	// "permission" (`permission dicer`) or "adapt" (a whole Caddyfile
	// through the caddyfile adapter).
	module string
	input  string
	// want are substrings the error must contain (case-sensitive).
	want []string
	// never are substrings the error must not contain, such as a secret.
	never []string
}

// TestCaddyfileErrors is R9/R10's "every bad setting is a clear error
// naming it" for the Caddyfile.
func TestCaddyfileErrors(t *testing.T) {
	badPrefix := "dicr_" + cfSecret + "_" + cfFingerprint
	badFP := "dicer_" + cfSecret + "_" + strings.Repeat("g", 64)
	shortFP := "dicer_" + cfSecret + "_" + cfFingerprint[:40]
	tests := []caddyfileErrorCase{
		// The label sets (R2f).
		{
			name: "labels_unknown_set", module: "adapt", input: ":80 {\n reverse_proxy {\n  dynamic docker {\n   labels caddy-dicer nginx-proxy\n  }\n }\n}",
			want: []string{"labels", `"nginx-proxy"`, "is not a label set", "Caddyfile:4"},
		},
		{
			name: "labels_without_value", module: "adapt", input: "{\n on_demand_tls {\n  permission docker {\n   labels\n  }\n }\n}",
			want: []string{"labels", "names no label set"},
		},
		{
			name: "labels_set_twice", module: "adapt", input: ":80 {\n reverse_proxy {\n  dynamic swarm {\n   labels traefik traefik\n  }\n }\n}",
			want: []string{"labels", "traefik is named twice"},
		},
		{
			name: "labels_setting_twice", module: "adapt", input: ":80 {\n reverse_proxy {\n  dynamic docker {\n   labels traefik\n   labels caddy-docker-proxy\n  }\n }\n}",
			want: []string{"labels has already been specified"},
		},
		// The follow selector (R2g).
		{
			name: "follow_bad_selector", module: "adapt", input: ":80 {\n reverse_proxy {\n  dynamic docker {\n   follow env in prod\n  }\n }\n}",
			want: []string{"follow", `expected "(" after "in"`, "Caddyfile:4"},
		},
		{
			name: "follow_without_value", module: "adapt", input: "{\n on_demand_tls {\n  permission swarm {\n   follow\n  }\n }\n}",
			want: []string{"follow", "names no selector"},
		},
		{
			name: "follow_twice", module: "adapt", input: ":80 {\n reverse_proxy {\n  dynamic swarm {\n   follow env=prod\n   follow env=staging\n  }\n }\n}",
			want: []string{"follow has already been specified"},
		},
		// A setting given twice.
		{
			name: "address_twice", module: "upstreams", input: "dicer {\n address unix:///a.sock\n address unix:///b.sock\n}",
			want: []string{"address has already been specified"},
		},
		{
			name: "token_twice", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfToken + "\n token " + cfToken + "\n}",
			want: []string{"token has already been specified"}, never: []string{cfSecret},
		},
		{
			name: "published_port_host_twice", module: "upstreams", input: "dicer {\n published_port_host 10.0.0.5\n published_port_host 10.0.0.6\n}",
			want: []string{"published_port_host has already been specified"},
		},
		{
			name: "readiness_timeout_twice", module: "permission", input: "docker {\n readiness_timeout 5s\n readiness_timeout 6s\n}",
			want: []string{"readiness_timeout has already been specified"},
		},
		{
			name: "readiness_timeout_not_a_duration", module: "upstreams", input: "dicer {\n readiness_timeout soon\n}",
			want: []string{"readiness_timeout", `"soon"`, "positive duration"},
		},
		{
			name: "readiness_timeout_zero", module: "upstreams", input: "dicer {\n readiness_timeout 0s\n}",
			want: []string{"readiness_timeout", "positive duration"},
		},
		{
			name: "readiness_timeout_without_value", module: "upstreams", input: "dicer {\n readiness_timeout\n}",
			want: []string{"wrong argument count", "'readiness_timeout'"},
		},
		{
			name: "selector_inline_and_block", module: "upstreams", input: "dicer app=web {\n selector app=api\n}",
			want: []string{"selector has already been specified", "shorthand `dicer app=web`", "not both", "Testfile:2"},
		},
		{
			name: "selector_twice_in_block", module: "upstreams", input: "dicer {\n selector app=web\n selector app=api\n}",
			want: []string{"selector has already been specified", "Testfile:3"}, never: []string{"shorthand"},
		},
		{
			name: "port_inline_and_block", module: "upstreams", input: "dicer app=web 8080 {\n port 9090\n}",
			want: []string{"port has already been specified", "not both", "Testfile:2"},
		},
		{
			name: "tls_twice", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfTokenNoFP + "\n tls {\n  ca /a.pem\n }\n tls {\n  ca /b.pem\n }\n}",
			want: []string{"tls has already been specified"},
		},
		{
			name: "tls_ca_twice", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfTokenNoFP + "\n tls {\n  ca /a.pem\n  ca /b.pem\n }\n}",
			want: []string{"tls ca has already been specified"},
		},
		{
			name: "tls_server_name_twice", module: "permission", input: "dicer {\n address 192.0.2.10:7443\n token " + cfTokenNoFP + "\n tls {\n  server_name a\n  server_name b\n }\n}",
			want: []string{"tls server_name has already been specified"},
		},
		{
			name: "permission_address_twice", module: "permission", input: "dicer {\n address unix:///a.sock\n address unix:///b.sock\n}",
			want: []string{"address has already been specified"},
		},

		// An unknown setting.
		{
			name: "unknown_setting", module: "upstreams", input: "dicer {\n adress unix:///a.sock\n}", //nolint:misspell // a deliberate typo
			want: []string{"unrecognized", "'adress'"},
		},
		{
			name: "unknown_tls_setting", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfTokenNoFP + "\n tls {\n  cert /c.pem\n }\n}",
			want: []string{"unrecognized tls setting 'cert'", "want ca, server_name"},
		},
		{
			name: "permission_unknown_setting", module: "permission", input: "dicer {\n frobnicate yes\n}",
			want: []string{"unrecognized", "'frobnicate'"},
		},
		{
			name: "permission_bad_selector", module: "permission", input: "dicer {\n selector \"tier in (a\"\n}",
			want: []string{"selector", "offset 10"},
		},
		{name: "permission_selector_twice", module: "permission", input: "dicer {\n selector a\n selector b\n}", want: []string{"selector has already been specified"}},
		{name: "permission_selector_two_values", module: "permission", input: "dicer {\n selector a b\n}", want: []string{"wrong argument count"}},
		{name: "permission_allow_suffix_without_domain", module: "permission", input: "dicer {\n allow_suffix\n}", want: []string{"allow_suffix", "one or more domains"}},
		{name: "permission_allow_suffix_wildcard", module: "permission", input: "dicer {\n allow_suffix example.com *.example.net\n}", want: []string{"allow_suffix", `"*.example.net"`, "not a domain name"}},
		{name: "permission_allow_suffix_with_port", module: "permission", input: "dicer {\n allow_suffix example.com:443\n}", want: []string{"allow_suffix", `"example.com:443"`}},
		{name: "permission_allow_suffix_leading_dot", module: "permission", input: "dicer {\n allow_suffix .example.com\n}", want: []string{"allow_suffix", `".example.com"`}},
		{name: "permission_allow_suffix_twice", module: "permission", input: "dicer {\n allow_suffix a.example\n allow_suffix b.example\n}", want: []string{"allow_suffix has already been specified"}},
		{name: "permission_wildcards_bad_value", module: "permission", input: "dicer {\n wildcards yes\n}", want: []string{"wildcards", `"yes"`, "allow nor refuse"}},
		{name: "permission_wildcards_without_value", module: "permission", input: "dicer {\n wildcards\n}", want: []string{"wrong argument count"}},
		{name: "permission_wildcards_twice", module: "permission", input: "dicer {\n wildcards allow\n wildcards refuse\n}", want: []string{"wildcards has already been specified"}},
		{name: "docker_permission_wildcards_bad_value", module: "docker_permission", input: "docker {\n wildcards on\n}", want: []string{"wildcards", `"on"`}},
		{
			name: "permission_refuses_port", module: "permission", input: "dicer {\n port 8080\n}",
			want: []string{"unrecognized", "'port'"},
		},
		{
			name: "permission_refuses_inline_args", module: "permission", input: "dicer app=web",
			want: []string{"wrong argument count", "'app=web'"},
		},

		// A bad port.
		{
			name: "port_inline_zero", module: "upstreams", input: "dicer app=web 0",
			want: []string{"port", `"0"`, "1-65535"},
		},
		{
			name: "port_inline_too_big", module: "upstreams", input: "dicer app=web 70000",
			want: []string{"port", `"70000"`, "1-65535"},
		},
		{
			name: "port_inline_name", module: "upstreams", input: "dicer app=web http",
			want: []string{"port", `"http"`, "1-65535"},
		},
		{
			name: "port_block_zero", module: "upstreams", input: "dicer {\n port 0\n}",
			want: []string{"port", `"0"`, "1-65535"},
		},
		{
			name: "port_block_too_big", module: "upstreams", input: "dicer {\n port 70000\n}",
			want: []string{"port", `"70000"`, "1-65535"},
		},
		{
			name: "port_block_name", module: "upstreams", input: "dicer {\n port http\n}",
			want: []string{"port", `"http"`, "1-65535"},
		},
		{
			name: "port_block_negative", module: "upstreams", input: "dicer {\n port -1\n}",
			want: []string{"port", `"-1"`, "1-65535"},
		},

		// A bad selector; the selector package points at the offset (R8).
		{
			name: "selector_inline_unclosed_set", module: "upstreams", input: `dicer "tier in (a"`,
			want: []string{"selector", "tier in (a", "offset 10"},
		},
		{
			name: "selector_block_unclosed_set", module: "upstreams", input: "dicer {\n selector \"tier in (a\"\n}",
			want: []string{"selector", "tier in (a", "offset 10"},
		},
		{
			name: "selector_bad_operator", module: "upstreams", input: "dicer app=web,=x",
			want: []string{"selector", "offset"},
		},

		// Too many or too few arguments.
		{
			name: "too_many_inline_args", module: "upstreams", input: "dicer app=web 8080 extra",
			want: []string{"wrong argument count", "'extra'"},
		},
		{
			name: "address_without_value", module: "upstreams", input: "dicer {\n address\n}",
			want: []string{"wrong argument count", "'address'"},
		},
		{
			name: "address_two_values", module: "upstreams", input: "dicer {\n address unix:///a.sock unix:///b.sock\n}",
			want: []string{"wrong argument count"},
		},
		{
			name: "token_without_value", module: "permission", input: "dicer {\n address 192.0.2.10:7443\n token\n}",
			want: []string{"wrong argument count", "'token'"},
		},
		{
			name: "token_two_values_keeps_secret", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfToken + " extra\n}",
			want: []string{"token"}, never: []string{cfSecret},
		},
		{
			name: "selector_without_value", module: "upstreams", input: "dicer {\n selector\n}",
			want: []string{"wrong argument count", "'selector'"},
		},
		{
			name: "port_without_value", module: "upstreams", input: "dicer {\n port\n}",
			want: []string{"wrong argument count", "'port'"},
		},
		{
			name: "port_two_values", module: "upstreams", input: "dicer {\n port 80 81\n}",
			want: []string{"wrong argument count"},
		},
		{
			name: "published_port_host_without_value", module: "upstreams", input: "dicer {\n published_port_host\n}",
			want: []string{"wrong argument count", "'published_port_host'"},
		},
		{
			name: "tls_with_argument", module: "upstreams", input: "dicer {\n tls /a.pem\n}",
			want: []string{"wrong argument count", "'/a.pem'"},
		},
		{
			name: "tls_ca_without_value", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfTokenNoFP + "\n tls {\n  ca\n }\n}",
			want: []string{"wrong argument count", "'ca'"},
		},

		// The address.
		{
			name: "address_without_port", module: "upstreams", input: "dicer {\n address dicer.example\n token " + cfToken + "\n}",
			want: []string{"address", "dicer.example"},
		},
		{
			name: "address_empty_unix_path", module: "permission", input: "dicer {\n address unix://\n}",
			want: []string{"address", "no socket path"},
		},

		// A token with a unix socket.
		{
			name: "token_with_default_address", module: "upstreams", input: "dicer {\n token " + cfToken + "\n}",
			want: []string{"token", "unix socket", "unix:///run/dicer/dicer.sock"}, never: []string{cfSecret},
		},
		{
			name: "token_with_unix_address", module: "upstreams", input: "dicer {\n address unix:///var/run/dicer.sock\n token " + cfToken + "\n}",
			want: []string{"token", "unix socket", "unix:///var/run/dicer.sock"}, never: []string{cfSecret},
		},
		{
			name: "token_with_unix_abstract_address", module: "permission", input: "dicer {\n address unix-abstract:dicer\n token " + cfToken + "\n}",
			want: []string{"token", "unix socket"}, never: []string{cfSecret},
		},
		{
			name: "permission_token_with_default_address", module: "permission", input: "dicer {\n token " + cfToken + "\n}",
			want: []string{"token", "unix socket"}, never: []string{cfSecret},
		},

		// A TCP address without a token.
		{
			name: "tcp_without_token", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n}",
			want: []string{"token", "required", "192.0.2.10:7443"},
		},
		{
			name: "permission_tcp_without_token", module: "permission", input: "dicer {\n address dicer.example:7443\n}",
			want: []string{"token", "required", "dicer.example:7443"},
		},

		// A malformed token; the error never echoes the secret.
		{
			name: "token_without_prefix", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + badPrefix + "\n}",
			want: []string{"token", "malformed", `"dicer_"`}, never: []string{cfSecret},
		},
		{
			name: "token_bad_fingerprint", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + badFP + "\n}",
			want: []string{"token", "malformed", "fingerprint"}, never: []string{cfSecret},
		},
		{
			name: "token_short_fingerprint", module: "permission", input: "dicer {\n address 192.0.2.10:7443\n token " + shortFP + "\n}",
			want: []string{"token", "malformed", "fingerprint", "64"}, never: []string{cfSecret},
		},
		{
			name: "token_short_secret", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token dicer_tooshort\n}",
			want: []string{"token", "malformed", "secret"}, never: []string{"tooshort"},
		},

		// tls only fits a TCP daemon whose token carries no fingerprint (R9).
		{
			name: "tls_with_unix_socket", module: "upstreams", input: "dicer {\n tls {\n  server_name dicer.example\n }\n}",
			want: []string{"tls", "unix socket"},
		},
		{
			name: "tls_ca_with_unix_socket", module: "permission", input: "dicer {\n address unix:///run/dicer.sock\n tls {\n  ca /etc/caddy/dicer-ca.pem\n }\n}",
			want: []string{"tls", "unix socket"},
		},
		{
			name: "tls_with_fingerprint_token", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfToken + "\n tls {\n  ca /etc/caddy/dicer-ca.pem\n }\n}",
			want: []string{"tls", "fingerprint"}, never: []string{cfSecret},
		},

		// Docker Engine (R9, R11): the same shape with the Engine's settings.
		{name: "docker_address_twice", module: "docker", input: "docker {\n address unix:///a.sock\n address unix:///b.sock\n}", want: []string{"address has already been specified"}},
		{name: "docker_network_twice", module: "docker", input: "docker {\n network a\n network b\n}", want: []string{"network has already been specified"}},
		{name: "docker_network_without_value", module: "docker", input: "docker {\n network\n}", want: []string{"wrong argument count", "network"}},
		{name: "docker_token_unknown", module: "docker", input: "docker {\n token abc\n}", want: []string{"unrecognized docker setting 'token'"}},
		{name: "docker_unknown_tls_setting", module: "docker", input: "docker {\n address tcp://127.0.0.1:2376\n tls {\n  server_name x\n }\n}", want: []string{"unrecognized tls setting 'server_name'", "ca, cert, key"}},
		{name: "docker_tls_cert_twice", module: "docker", input: "docker {\n address tcp://127.0.0.1:2376\n tls {\n  cert /a.pem\n  cert /b.pem\n }\n}", want: []string{"tls cert has already been specified"}},
		{name: "docker_bad_port", module: "docker", input: "docker app=web 0", want: []string{"port", `"0"`}},
		{name: "docker_bad_selector", module: "docker", input: "docker {\n selector \"tier notin (a\"\n}", want: []string{"selector", "offset"}},
		{name: "docker_bad_address", module: "docker", input: "docker {\n address http://127.0.0.1:2375\n}", want: []string{"address"}},
		{name: "docker_cert_without_key", module: "docker", input: "docker {\n address tcp://127.0.0.1:2376\n tls {\n  cert /a.pem\n }\n}", want: []string{"tls", "key"}},
		{name: "docker_permission_refuses_network", module: "docker_permission", input: "docker {\n network a\n}", want: []string{"unrecognized docker permission setting 'network'"}},

		// The line of the setting at fault (Testfile:N), also for errors
		// found once the block is read: a combination points at the later
		// of its settings.
		{
			name: "line_selector_in_block", module: "upstreams", input: "dicer {\n port 8080\n selector \"app in (a,b\"\n\n}",
			want: []string{"selector", "offset", "Testfile:3"},
		},
		{
			name: "line_port_in_block", module: "upstreams", input: "dicer {\n selector app=web\n port http\n}",
			want: []string{"port", `"http"`, "Testfile:3"},
		},
		{
			name: "line_token_after_unix_address", module: "upstreams", input: "dicer {\n address unix:///var/run/dicer.sock\n port 8080\n token " + cfToken + "\n readiness_timeout 5s\n}",
			want: []string{"token", "unix socket", "Testfile:4"}, never: []string{cfSecret},
		},
		{
			name: "line_unix_address_after_token", module: "upstreams", input: "dicer {\n token " + cfToken + "\n port 8080\n address unix:///var/run/dicer.sock\n}",
			want: []string{"token", "unix socket", "Testfile:4"}, never: []string{cfSecret},
		},
		{
			name: "line_token_with_default_address", module: "permission", input: "dicer {\n published_port_host 10.0.0.5\n token " + cfToken + "\n readiness_timeout 5s\n}",
			want: []string{"token", "unix socket", "Testfile:3"}, never: []string{cfSecret},
		},
		{
			name: "line_tcp_address_without_token", module: "permission", input: "dicer {\n readiness_timeout 5s\n address 192.0.2.10:7443\n published_port_host 10.0.0.5\n}",
			want: []string{"token", "required", "Testfile:3"},
		},
		{
			name: "line_malformed_token", module: "upstreams", input: "dicer {\n token dicer_tooshort\n address 192.0.2.10:7443\n port 8080\n}",
			want: []string{"token", "malformed", "Testfile:"}, never: []string{"tooshort"},
		},
		{
			name: "line_tls_after_fingerprint_token", module: "upstreams", input: "dicer {\n address 192.0.2.10:7443\n token " + cfToken + "\n tls {\n  ca /etc/caddy/dicer-ca.pem\n }\n port 8080\n}",
			want: []string{"tls", "fingerprint", "Testfile:4"}, never: []string{cfSecret},
		},
		{
			name: "line_docker_cert_without_key", module: "docker", input: "docker {\n address tcp://127.0.0.1:2376\n tls {\n  cert /a.pem\n }\n network web\n}",
			want: []string{"tls", "key", "Testfile:3"},
		},
		{
			name: "line_docker_tls_with_unix_address", module: "docker_permission", input: "docker {\n tls {\n  ca /a.pem\n }\n address unix:///var/run/docker.sock\n}",
			want: []string{"tls", "unix socket", "Testfile:5"},
		},

		// A selector with spaces, unquoted.
		{
			name: "unquoted_selector_with_port", module: "upstreams", input: "dicer app in (a,b) 8080",
			want: []string{"quote a selector that has spaces", `"app in (a,b)"`, "Testfile:1"},
		},
		{
			name: "unquoted_selector_without_port", module: "docker", input: "docker tier notin (canary, beta)",
			want: []string{"quote a selector that has spaces", `"tier notin (canary, beta)"`},
		},
		{
			name: "unquoted_selector_in_block", module: "upstreams", input: "dicer {\n port 8080\n selector app in (a,b)\n}",
			want: []string{"quote a selector that has spaces", `"app in (a,b)"`, "Testfile:3"},
		},

		// Through the whole caddyfile adapter, so that the error carries the
		// Caddyfile's name and line.
		{
			name: "adapt_bad_port", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer app=web 70000\n\t}\n}\n",
			want: []string{"port", `"70000"`, "Caddyfile:3"},
		},
		{
			name: "adapt_unknown_setting", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer {\n\t\t\tselectr app=web\n\t\t}\n\t}\n}\n",
			want: []string{"unrecognized", "'selectr'", "Caddyfile:4"},
		},
		{
			name: "adapt_address_twice", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer {\n\t\t\taddress unix:///a.sock\n\t\t\taddress unix:///b.sock\n\t\t}\n\t}\n}\n",
			want: []string{"address has already been specified", "Caddyfile:5"},
		},
		{
			name: "adapt_bad_selector", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer \"tier in (a\"\n\t}\n}\n",
			want: []string{"selector", "offset 10", "Caddyfile:3"},
		},
		{
			name: "adapt_permission_token_with_unix", module: "adapt", input: "{\n\ton_demand_tls {\n\t\tpermission dicer {\n\t\t\ttoken " + cfToken + "\n\t\t}\n\t}\n}\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\trespond ok\n}\n",
			want: []string{"token", "unix socket", "Caddyfile:"}, never: []string{cfSecret},
		},
		{
			name: "adapt_selector_in_block", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer {\n\t\t\tselector \"app in (a,b\"\n\t\t\tport 8080\n\t\t}\n\t}\n}\n",
			want: []string{"selector", "offset", "Caddyfile:4"},
		},
		{
			name: "adapt_unquoted_selector", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer app in (a,b) 8080\n\t}\n}\n",
			want: []string{"quote a selector that has spaces", "Caddyfile:3"},
		},
		{
			name: "adapt_token_with_unix_address", module: "adapt", input: ":8884 {\n\treverse_proxy {\n\t\tdynamic dicer {\n\t\t\taddress unix:///run/dicer.sock\n\t\t\ttoken " + cfToken + "\n\t\t\tport 8080\n\t\t}\n\t}\n}\n",
			want: []string{"token", "unix socket", "Caddyfile:5"}, never: []string{cfSecret},
		},
		{
			name: "adapt_permission_token_line", module: "adapt", input: "{\n\ton_demand_tls {\n\t\tpermission dicer {\n\t\t\ttoken " + cfToken + "\n\t\t}\n\t}\n}\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\trespond ok\n}\n",
			want: []string{"token", "unix socket", "Caddyfile:4"}, never: []string{cfSecret},
		},
		{
			name: "adapt_permission_unknown_setting", module: "adapt", input: "{\n\ton_demand_tls {\n\t\tpermission dicer {\n\t\t\tallow_sufix example.com\n\t\t}\n\t}\n}\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\trespond ok\n}\n",
			want: []string{"unrecognized", "'allow_sufix'", "Caddyfile:4"},
		},
		{
			name: "adapt_permission_bad_wildcards", module: "adapt", input: "{\n\ton_demand_tls {\n\t\tpermission docker {\n\t\t\tallow_suffix example.com\n\t\t\twildcards true\n\t\t}\n\t}\n}\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\trespond ok\n}\n",
			want: []string{"wildcards", `"true"`, "Caddyfile:5"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := cfUnmarshalError(t, tc)
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.input)
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(msg, n) {
					t.Errorf("error %q contains %q, which it must not", msg, n)
				}
			}
		})
	}
}

func cfUnmarshalError(t *testing.T, tc caddyfileErrorCase) error {
	t.Helper()
	switch tc.module {
	case "upstreams":
		return new(DicerUpstreams).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
	case "permission":
		return new(DicerPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
	case "docker":
		return new(DockerUpstreams).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
	case "docker_permission":
		return new(DockerPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
	case "adapt":
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tc.input), nil)
		return err
	}
	t.Fatalf("unknown module %q", tc.module)
	return nil
}

// TestCaddyfileUnmarshal checks the fields a Caddyfile sets, beside the
// golden files: inline arguments, block settings and nested tls.
func TestCaddyfileUnmarshal(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		want   DicerUpstreams
		perm   bool
		wantPm DicerPermission
	}{
		{name: "no_args", input: "dicer", want: DicerUpstreams{}},
		{name: "inline_selector", input: "dicer app=web", want: DicerUpstreams{upstreamSource: upstreamSource{Selector: "app=web"}}},
		{name: "inline_selector_port", input: "dicer app=web 8080", want: DicerUpstreams{upstreamSource: upstreamSource{Selector: "app=web", Port: 8080}}},
		{name: "quoted_selector", input: `dicer "tier in (frontend,edge)" 65535`, want: DicerUpstreams{upstreamSource: upstreamSource{Selector: "tier in (frontend,edge)", Port: 65535}}},
		{name: "inline_selector_block_port", input: "dicer app=web {\n port 1\n}", want: DicerUpstreams{upstreamSource: upstreamSource{Selector: "app=web", Port: 1}}},
		{name: "empty_block", input: "dicer {\n}", want: DicerUpstreams{}},
		{name: "readiness_timeout", input: "dicer {\n readiness_timeout 1m30s\n}", want: DicerUpstreams{DicerDaemon: DicerDaemon{Readiness: Readiness{ReadinessTimeout: caddy.Duration(90 * time.Second)}}}},
		{
			name:  "every_setting",
			input: "dicer {\n address dicer.example:7443\n token " + cfTokenNoFP + "\n selector !internal\n port 8080\n published_port_host 10.0.0.5\n tls {\n  ca /etc/caddy/dicer-ca.pem\n  server_name dicer.example\n }\n}",
			want: DicerUpstreams{
				DicerDaemon: DicerDaemon{
					Address:           "dicer.example:7443",
					Token:             cfTokenNoFP,
					PublishedPortHost: "10.0.0.5",
					TLS:               &DicerTLS{CA: "/etc/caddy/dicer-ca.pem", ServerName: "dicer.example"},
				},
				upstreamSource: upstreamSource{Selector: "!internal", Port: 8080},
			},
		},
		{
			name:  "placeholders_skip_static_checks",
			input: "dicer {\n address {env.DICER_ADDRESS}\n token {env.DICER_TOKEN}\n}",
			want:  DicerUpstreams{DicerDaemon: DicerDaemon{Address: "{env.DICER_ADDRESS}", Token: "{env.DICER_TOKEN}"}},
		},
		{
			name:   "permission_every_setting",
			input:  "dicer {\n address 192.0.2.10:7443\n token " + cfToken + "\n published_port_host 192.0.2.10\n}",
			perm:   true,
			wantPm: DicerPermission{DicerDaemon: DicerDaemon{Address: "192.0.2.10:7443", Token: cfToken, PublishedPortHost: "192.0.2.10"}},
		},
		{name: "permission_empty", input: "dicer", perm: true, wantPm: DicerPermission{}},
		{
			name:  "permission_hosts_settings",
			input: "dicer {\n allow_suffix apps.example.com Example.NET.\n selector \"tenant in (a,b)\"\n wildcards allow\n}",
			perm:  true,
			wantPm: DicerPermission{hostPermission: hostPermission{
				AllowSuffix: []string{"apps.example.com", "Example.NET."}, Selector: "tenant in (a,b)", Wildcards: "allow",
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got, want any
			var err error
			if tc.perm {
				p := new(DicerPermission)
				err = p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
				got, want = p, &tc.wantPm
			} else {
				u := new(DicerUpstreams)
				err = u.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
				got, want = u, &tc.want
			}
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) {
				t.Errorf("got %s\nwant %s", g, w)
			}
		})
	}
}

// TestCaddyfileJSONValidation is `caddy validate` on a JSON config (R9): a
// bad setting that only JSON (or a placeholder) can carry is refused at
// Provision, before any daemon connection, with an error naming it.
// Successful provisioning, which connects, is tested elsewhere.
func TestCaddyfileJSONValidation(t *testing.T) {
	dir := t.TempDir()
	noPEM := filepath.Join(dir, "not-a-ca.pem")
	if err := os.WriteFile(noPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CADDY_DICER_TEST_BAD_TOKEN", "dicr_"+cfSecret+"_"+cfFingerprint+"\n")
	t.Setenv("CADDY_DICER_TEST_BAD_FINGERPRINT", "dicer_"+cfSecret+"_"+strings.Repeat("z", 64))
	t.Setenv("CADDY_DICER_TEST_TOKEN", cfToken)
	t.Setenv("CADDY_DICER_TEST_EMPTY", "")
	t.Setenv("CADDY_DICER_TEST_UNIX", "unix:///run/dicer/other.sock")

	tests := []struct {
		name   string
		module string // "upstreams" or "permission"
		json   string
		want   []string
		never  []string
	}{
		{
			name: "bad_selector", module: "upstreams", json: `{"selector":"tier in (a"}`,
			want: []string{"selector", "offset 10"},
		},
		{
			name: "bad_selector_operator", module: "upstreams", json: `{"selector":"app==="}`,
			want: []string{"selector", "offset"},
		},
		{
			name: "permission_bad_selector", module: "permission", json: `{"selector":"tier in (a"}`,
			want: []string{"selector", "offset 10"},
		},
		{
			name: "permission_allow_suffix_not_a_domain", module: "permission", json: `{"allow_suffix":["example.com",""]}`,
			want: []string{"allow_suffix", `""`, "not a domain name"},
		},
		{
			name: "permission_wildcards_bad_value", module: "permission", json: `{"wildcards":"yes"}`,
			want: []string{"wildcards", `"yes"`, "allow nor refuse"},
		},
		{
			name: "port_too_big", module: "upstreams", json: `{"port":70000}`,
			want: []string{"port", "70000", "1-65535"},
		},
		{
			name: "port_negative", module: "upstreams", json: `{"port":-1}`,
			want: []string{"port", "-1", "1-65535"},
		},
		{
			name: "readiness_timeout_negative", module: "permission", json: `{"readiness_timeout":"-1s"}`,
			want: []string{"readiness_timeout", "negative"},
		},
		{
			name: "token_with_default_address", module: "upstreams", json: `{"token":"` + cfToken + `"}`,
			want: []string{"token", "unix socket"}, never: []string{cfSecret},
		},
		{
			name: "token_with_unix_address", module: "permission", json: `{"address":"unix:///run/dicer/dicer.sock","token":"` + cfToken + `"}`,
			want: []string{"token", "unix socket"}, never: []string{cfSecret},
		},
		{
			name: "token_placeholder_with_unix_placeholder", module: "upstreams", json: `{"address":"{env.CADDY_DICER_TEST_UNIX}","token":"{env.CADDY_DICER_TEST_TOKEN}"}`,
			want: []string{"token", "unix socket", "unix:///run/dicer/other.sock"}, never: []string{cfSecret},
		},
		{
			name: "tcp_without_token", module: "permission", json: `{"address":"192.0.2.10:7443"}`,
			want: []string{"token", "required"},
		},
		{
			name: "tcp_token_placeholder_empty", module: "upstreams", json: `{"address":"192.0.2.10:7443","token":"{env.CADDY_DICER_TEST_EMPTY}"}`,
			want: []string{"token", "required"},
		},
		{
			name: "tcp_token_placeholder_unset", module: "permission", json: `{"address":"192.0.2.10:7443","token":"{env.CADDY_DICER_TEST_NEVER_SET}"}`,
			want: []string{"token", "required"},
		},
		{
			name: "token_placeholder_without_prefix", module: "upstreams", json: `{"address":"192.0.2.10:7443","token":"{env.CADDY_DICER_TEST_BAD_TOKEN}"}`,
			want: []string{"token", "malformed", `"dicer_"`}, never: []string{cfSecret},
		},
		{
			name: "token_placeholder_bad_fingerprint", module: "permission", json: `{"address":"192.0.2.10:7443","token":"{env.CADDY_DICER_TEST_BAD_FINGERPRINT}"}`,
			want: []string{"token", "malformed", "fingerprint"}, never: []string{cfSecret},
		},
		{
			name: "bad_address", module: "upstreams", json: `{"address":"dicer.example","token":"` + cfToken + `"}`,
			want: []string{"address", "dicer.example"}, never: []string{cfSecret},
		},
		{
			name: "tls_ca_missing_file", module: "upstreams", json: `{"address":"192.0.2.10:7443","token":"` + cfTokenNoFP + `","tls":{"ca":"` + filepath.Join(dir, "missing.pem") + `"}}`,
			want: []string{"tls ca", "missing.pem"}, never: []string{cfSecret},
		},
		{
			name: "tls_ca_not_pem", module: "permission", json: `{"address":"192.0.2.10:7443","token":"` + cfTokenNoFP + `","tls":{"ca":"` + noPEM + `"}}`,
			want: []string{"tls ca", "no PEM certificate"}, never: []string{cfSecret},
		},
		{
			name: "tls_with_unix_socket", module: "upstreams", json: `{"tls":{"server_name":"dicer.example"}}`,
			want: []string{"tls", "unix socket"},
		},
		{
			name: "tls_with_fingerprint_token", module: "permission", json: `{"address":"192.0.2.10:7443","token":"` + cfToken + `","tls":{"server_name":"dicer.example"}}`,
			want: []string{"tls", "fingerprint"}, never: []string{cfSecret},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := newLoad(t)
			defer cancel()
			var err error
			switch tc.module {
			case "upstreams":
				u := new(DicerUpstreams)
				if err := caddy.StrictUnmarshalJSON([]byte(tc.json), u); err != nil {
					t.Fatal(err)
				}
				err = u.Provision(ctx)
				if err == nil {
					_ = u.Cleanup()
				}
			case "permission":
				p := new(DicerPermission)
				if err := caddy.StrictUnmarshalJSON([]byte(tc.json), p); err != nil {
					t.Fatal(err)
				}
				err = p.Provision(ctx)
				if err == nil {
					_ = p.Cleanup()
				}
			default:
				t.Fatalf("unknown module %q", tc.module)
			}
			if err == nil {
				t.Fatalf("Provision accepted %s", tc.json)
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(msg, n) {
					t.Errorf("error %q contains %q, which it must not", msg, n)
				}
			}
		})
	}
}
