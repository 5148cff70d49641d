package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// TestDaemonsPermission is R7 and R7a over several daemons, without Caddy:
// a name is allowed when one daemon's permission, with its own settings,
// allows it.
func TestDaemonsPermission(t *testing.T) {
	p := &DaemonsPermission{perms: []*hostPermission{
		// A Dicer host whose tenants get names under apps.example.com only.
		permissionFor(t, hostPermission{AllowSuffix: []string{"apps.example.com"}},
			claimant("shop", "shop.apps.example.com"), claimant("rogue", "bank.example.net")),
		// A Docker Engine that allows wildcards.
		permissionFor(t, hostPermission{Wildcards: "allow"},
			claimant("blog", "blog.example.org"), claimant("previews", "*.preview.example.org")),
	}}
	for name, want := range map[string]error{
		"shop.apps.example.com":   nil,               // the first daemon's
		"blog.example.org":        nil,               // the second's
		"a.preview.example.org":   nil,               // the second's wildcard, allowed there
		"bank.example.net":        errNoDaemonAllows, // claimed on the first, outside its allow_suffix
		"scanner.example.com":     errNoDaemonAllows,
		"a.b.preview.example.org": errNoDaemonAllows, // a wildcard stands for one label
	} {
		if got := p.CertificateAllowed(context.Background(), name); got != want {
			t.Errorf("CertificateAllowed(%s) = %v, want %v", name, got, want)
		}
	}
	if !errors.Is(errNoDaemonAllows, caddytls.ErrPermissionDenied) {
		t.Error("the refusal does not wrap caddytls.ErrPermissionDenied")
	}
}

// TestDaemonsPermissionRefusalAllocatesNothing: a scanner's names cost no
// allocation, however many daemons are asked.
func TestDaemonsPermissionRefusalAllocatesNothing(t *testing.T) {
	p := &DaemonsPermission{perms: []*hostPermission{
		permissionFor(t, hostPermission{AllowSuffix: []string{"example.com"}}, claimant("wild", "*.w.example.com")),
		permissionFor(t, hostPermission{}, claimant("shop", "shop.example.org")),
		permissionFor(t, hostPermission{Selector: "tenant=trusted"}, claimant("blog", "blog.example.org")),
	}}
	ctx := context.Background()
	for _, name := range []string{"scanner.example.net", "scanner.w.example.com", "blog.example.org"} {
		if err := p.CertificateAllowed(ctx, name); err != errNoDaemonAllows {
			t.Fatalf("%s: %v, want a refusal", name, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = p.CertificateAllowed(ctx, name) }); n != 0 {
			t.Errorf("refusing %s: %v allocations, want 0", name, n)
		}
	}
}

// TestDaemonsPermissionCaddyfileErrors: each error names the line of the
// block, or of the setting, at fault.
func TestDaemonsPermissionCaddyfileErrors(t *testing.T) {
	site := "\n\nhttps:// {\n\ttls {\n\t\ton_demand\n\t}\n\trespond ok\n}\n"
	for _, tc := range []struct {
		name, input string
		want        []string
	}{
		{
			name:  "unknown_daemon",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\tdicer\n\t\t\tpodman {\n\t\t\t}\n\t\t}\n\t}\n}" + site,
			want:  []string{"unrecognized daemon 'podman'", "dicer, docker", "Caddyfile:5"},
		},
		{
			name:  "not_a_daemon_permission",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\thttp https://ask.example.com\n\t\t}\n\t}\n}" + site,
			want:  []string{"unrecognized daemon 'http'", "Caddyfile:4"},
		},
		{
			name:  "nested",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\tdaemons {\n\t\t\t\tdicer\n\t\t\t}\n\t\t}\n\t}\n}" + site,
			want:  []string{"unrecognized daemon 'daemons'", "Caddyfile:4"},
		},
		{
			name:  "bad_setting_of_the_second_block",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\tdicer\n\t\t\tdocker {\n\t\t\t\tallow_suffix example.com\n\t\t\t\twildcards maybe\n\t\t\t}\n\t\t}\n\t}\n}" + site,
			want:  []string{"wildcards", `"maybe"`, "Caddyfile:7"},
		},
		{
			name:  "unknown_setting",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\tdicer {\n\t\t\t\tnetwork web\n\t\t\t}\n\t\t}\n\t}\n}" + site,
			want:  []string{"unrecognized dicer permission setting 'network'", "Caddyfile:5"},
		},
		{
			name:  "token_with_unix_socket",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons {\n\t\t\tdicer {\n\t\t\t\taddress unix:///run/dicer/dicer.sock\n\t\t\t\ttoken " + cfToken + "\n\t\t\t}\n\t\t}\n\t}\n}" + site,
			want:  []string{"token", "unix socket", "Caddyfile:6"},
		},
		{
			name:  "no_block",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons\n\t}\n}" + site,
			want:  []string{"wants a block per daemon", "Caddyfile:3"},
		},
		{
			name:  "argument",
			input: "{\n\ton_demand_tls {\n\t\tpermission daemons dicer\n\t}\n}" + site,
			want:  []string{"wrong argument count", "Caddyfile:3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tc.input), nil)
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.input)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), cfSecret) {
				t.Errorf("error %q holds the token's secret", err)
			}
		})
	}
}

// TestDaemonsPermissionUnmarshal: each block is its daemon's permission
// module, with that module's settings, in the order given.
func TestDaemonsPermissionUnmarshal(t *testing.T) {
	p := new(DaemonsPermission)
	err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`daemons {
		dicer {
			address unix:///run/dicer/a.sock
			allow_suffix apps.example.com
		}
		docker
		dicer {
			address unix:///run/dicer/b.sock
			wildcards allow
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"address":"unix:///run/dicer/a.sock","allow_suffix":["apps.example.com"],"module":"dicer"}`,
		`{"module":"docker"}`,
		`{"address":"unix:///run/dicer/b.sock","module":"dicer","wildcards":"allow"}`,
	}
	if len(p.DaemonsRaw) != len(want) {
		t.Fatalf("got %d daemons, want %d: %s", len(p.DaemonsRaw), len(want), p.DaemonsRaw)
	}
	for i, raw := range p.DaemonsRaw {
		if string(raw) != want[i] {
			t.Errorf("daemons[%d] = %s, want %s", i, raw, want[i])
		}
	}
}

// TestDaemonsPermissionJSONValidation: a bad daemon in JSON is refused at
// Provision, named by its place in the list, before any connection.
func TestDaemonsPermissionJSONValidation(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"none", `{}`, []string{"daemons", "at least one", "dicer, docker"}},
		{"empty", `{"daemons":[]}`, []string{"daemons", "at least one"}},
		{"bad_selector", `{"daemons":[{"module":"docker","selector":"tier in (a"}]}`, []string{"daemons[0]", "tls.permission.docker", "selector", "offset 10"}},
		{"unknown_module", `{"daemons":[{"module":"podman"}]}`, []string{"daemons[0]", "podman"}},
		{"not_a_daemon", `{"daemons":[{"module":"http","endpoint":"https://ask.example.com"}]}`, []string{"daemons[0]", "tls.permission.http", "not a daemon's permission", "dicer, docker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			p := new(DaemonsPermission)
			if err := caddy.StrictUnmarshalJSON([]byte(tc.json), p); err != nil {
				t.Fatal(err)
			}
			err := p.Provision(ctx)
			if err == nil {
				t.Fatalf("Provision accepted %s", tc.json)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// BenchmarkDaemonsPermission is `permission daemons` over three daemons
// (1,000 claimants each) against one daemon's permission alone (the
// baseline): a name the first daemon allows, one the last allows, and a
// scanner's name none allows.
func BenchmarkDaemonsPermission(b *testing.B) {
	daemon := func(prefix string) *hostPermission {
		var list []catalog.Instance
		for i := range 1000 {
			list = append(list, claimant(fmt.Sprintf("%s-%04d", prefix, i), fmt.Sprintf("h%d.%s.example.com", i, prefix)))
		}
		return permissionFor(b, hostPermission{}, list...)
	}
	first := daemon("a")
	p := &DaemonsPermission{perms: []*hostPermission{first, daemon("b"), daemon("c")}}
	ctx := context.Background()
	for _, tc := range []struct {
		name, host string
		allowed    bool
	}{
		{"allowed_by_the_first", "h7.a.example.com", true},
		{"allowed_by_the_last", "h7.c.example.com", true},
		{"refused", "scanner.example.net", false},
	} {
		run := func(b *testing.B, perm caddytls.OnDemandPermission, allowed bool) {
			b.ReportAllocs()
			for b.Loop() {
				if err := perm.CertificateAllowed(ctx, tc.host); (err == nil) != allowed {
					b.Fatalf("%s: %v", tc.host, err)
				}
			}
		}
		if tc.name != "allowed_by_the_last" {
			b.Run(tc.name+"/one_daemon", func(b *testing.B) { run(b, first, tc.allowed) })
		}
		b.Run(tc.name+"/three_daemons", func(b *testing.B) { run(b, p, tc.allowed) })
	}
}

// laterBackend stands for a daemon added to the plugin later (Swarm): a
// permission module that embeds hostPermission with its own daemon
// settings, registered under its own name, and nothing else.
type laterBackend struct {
	DockerEngine
	hostPermission
}

func init() { caddy.RegisterModule(laterBackend{}) }

func (laterBackend) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "tls.permission.zz_later_backend", New: func() caddy.Module { return new(laterBackend) }}
}

func (p *laterBackend) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return p.unmarshal(d, "zz_later_backend", &p.DockerEngine)
}

// TestDaemonsPermissionTakesALaterBackend: a backend's permission module,
// once registered, is a kind of daemon `permission daemons` takes, with
// no change to it.
func TestDaemonsPermissionTakesALaterBackend(t *testing.T) {
	if !isDaemonKind("zz_later_backend") || !strings.Contains(daemonKinds(), "zz_later_backend") {
		t.Fatalf("a registered permission embedding hostPermission is not a daemon kind (kinds: %s)", daemonKinds())
	}
	p := new(DaemonsPermission)
	if err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser("daemons {\n dicer\n zz_later_backend {\n  allow_suffix example.com\n }\n}")); err != nil {
		t.Fatal(err)
	}
	if len(p.DaemonsRaw) != 2 || string(p.DaemonsRaw[1]) != `{"allow_suffix":["example.com"],"module":"zz_later_backend"}` {
		t.Errorf("daemons %s", p.DaemonsRaw)
	}
}

// The Swarm backend's permission is a kind `permission daemons` takes,
// with its own settings.
func TestDaemonsPermissionTakesSwarm(t *testing.T) {
	d := caddyfile.NewTestDispenser(`daemons {
		docker
		swarm {
			address unix:///run/swarm-manager.sock
			allow_suffix apps.example.net
		}
	}`)
	var p DaemonsPermission
	if err := p.UnmarshalCaddyfile(d); err != nil {
		t.Fatalf("permission daemons with a swarm block: %v", err)
	}
	if len(p.DaemonsRaw) != 2 || !strings.Contains(string(p.DaemonsRaw[1]), `"module":"swarm"`) {
		t.Errorf("blocks %s, want docker then swarm", p.DaemonsRaw)
	}
}
