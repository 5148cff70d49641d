package caddydicer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The Swarm modules' Caddyfile: the Docker settings that make sense for a
// manager (no published_port_host: tasks publish no ports of their own),
// plus endpoint.
func TestSwarmCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		perm  bool
		want  string // JSON of the module
	}{
		{name: "shorthand", input: "swarm app=web 8080", want: `{"selector":"app=web","port":8080}`},
		{
			name:  "every_setting",
			input: "swarm {\n address tcp://manager:2376\n selector app=web\n port 8080\n network front\n endpoint vip\n readiness_timeout 10s\n tls {\n  ca /ca.pem\n  cert /c.pem\n  key /k.pem\n }\n}",
			want:  `{"address":"tcp://manager:2376","tls":{"ca":"/ca.pem","cert":"/c.pem","key":"/k.pem"},"endpoint":"vip","readiness_timeout":10000000000,"selector":"app=web","port":8080,"network":"front"}`,
		},
		{name: "placeholder_address", input: "swarm {\n address {env.MANAGER}\n}", want: `{"address":"{env.MANAGER}"}`},
		{name: "permission", input: "swarm {\n allow_suffix example.com\n endpoint tasks\n}", perm: true, want: `{"endpoint":"tasks","allow_suffix":["example.com"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mod caddyfile.Unmarshaler = new(SwarmUpstreams)
			if tc.perm {
				mod = new(SwarmPermission)
			}
			if err := mod.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input)); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(mod)
			if !bytes.Equal(got, []byte(tc.want)) {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Each bad setting is an error that names it.
func TestSwarmCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		perm        bool
		want        []string
	}{
		{name: "bad_endpoint", input: "swarm {\n endpoint dnsrr\n}", want: []string{"endpoint", `"dnsrr"`, "tasks", "vip", "Testfile:2"}},
		{name: "endpoint_twice", input: "swarm {\n endpoint vip\n endpoint tasks\n}", want: []string{"endpoint has already been specified"}},
		{name: "published_port_host", input: "swarm {\n published_port_host 10.0.0.5\n}", want: []string{"unrecognized swarm setting 'published_port_host'"}},
		{name: "bad_address", input: "swarm {\n address http://manager:2375\n}", want: []string{"address"}},
		{name: "tls_with_unix", input: "swarm {\n tls {\n  ca /a.pem\n }\n}", want: []string{"tls", "unix"}},
		{name: "permission_network", input: "swarm {\n network front\n}", perm: true, want: []string{"unrecognized swarm permission setting 'network'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mod caddyfile.Unmarshaler = new(SwarmUpstreams)
			if tc.perm {
				mod = new(SwarmPermission)
			}
			err := mod.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// `dynamic swarm` and `permission swarm` adapt to the swarm modules' JSON,
// which Caddy decodes into them (the module IDs are registered).
func TestSwarmAdapt(t *testing.T) {
	src := "{\n\ton_demand_tls {\n\t\tpermission swarm\n\t}\n}\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\treverse_proxy {\n\t\tdynamic swarm app=web 8080 {\n\t\t\tnetwork front\n\t\t}\n\t}\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"source":"swarm"`, `"network":"front"`, `"selector":"app=web"`, `"permission":{"module":"swarm"}`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("adapted config lacks %s:\n%s", want, out)
		}
	}
	for _, id := range []string{"http.reverse_proxy.upstreams.swarm", "tls.permission.swarm"} {
		if _, err := caddy.GetModule(id); err != nil {
			t.Errorf("module %s: %v", id, err)
		}
	}
}
