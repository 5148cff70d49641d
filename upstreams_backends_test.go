package caddydicer

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// TestBackends_registry: the registry holds every backend with its two
// modules, read from Caddy's module registry.
func TestBackends_registry(t *testing.T) {
	want := map[string][2]caddy.ModuleID{
		"dicer":            {"http.reverse_proxy.upstreams.dicer", "tls.permission.dicer"},
		"docker":           {"http.reverse_proxy.upstreams.docker", "tls.permission.docker"},
		"swarm":            {"http.reverse_proxy.upstreams.swarm", "tls.permission.swarm"},
		"zz_later_backend": {"", "tls.permission.zz_later_backend"}, // permission_multi_test.go
	}
	got := diceradmin.Backends()
	if len(got) != len(want) {
		t.Errorf("backends %v, want the kinds of %v", got, want)
	}
	for _, b := range got {
		if w, ok := want[b.Kind]; !ok || b.Upstreams != w[0] || b.Permission != w[1] {
			t.Errorf("backend %+v, want modules %v", b, w)
		}
	}
}

// TestBackends_every_list_shows_every_backend: each place that lists
// backends to a user lists every registered one, so a new backend (Swarm
// was once left out) is never missing from one.
func TestBackends_every_list_shows_every_backend(t *testing.T) {
	registered, ok := caddycmd.Commands()["dicer"]
	if !ok {
		t.Fatal("no caddy dicer command registered")
	}
	var cmd cobra.Command
	registered.CobraFunc(&cmd)
	emptyDaemons := new(DaemonsPermission).Provision(caddy.Context{})
	unknownDaemon := new(DaemonsPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("daemons {\n podman\n}"))
	emptyBlock := new(DaemonsPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("daemons {\n}"))
	lists := map[string]struct {
		text      string
		namespace string // the backends it lists: those with a module there ("": all)
	}{
		"caddy dicer help":                    {cmd.Short, ""},
		"permission daemons, none (JSON)":     {emptyDaemons.Error(), diceradmin.PermissionNamespace},
		"permission daemons, unknown daemon":  {unknownDaemon.Error(), diceradmin.PermissionNamespace},
		"permission daemons, no daemon block": {emptyBlock.Error(), diceradmin.PermissionNamespace},
	}
	for where, list := range lists {
		kinds := diceradmin.Kinds(list.namespace)
		if len(kinds) < 3 {
			t.Fatalf("%s: backends %v, want dicer, docker and swarm at least", where, kinds)
		}
		for _, kind := range kinds {
			if !strings.Contains(list.text, kind) {
				t.Errorf("%s: %q does not list the backend %s", where, list.text, kind)
			}
		}
	}
}

// TestBackends_kind_names_the_connection: a backend's upstream source
// names its connections (metrics, the admin API, logs) by the backend's
// kind. (Its permission embeds the same daemon settings.)
func TestBackends_kind_names_the_connection(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for _, b := range diceradmin.Backends() {
		for _, id := range []caddy.ModuleID{b.Upstreams} {
			if id == "" {
				continue
			}
			info, err := caddy.GetModule(string(id))
			if err != nil {
				t.Fatal(err)
			}
			settings, ok := info.New().(daemonSettings)
			if !ok {
				t.Errorf("%s has no daemon settings", id)
				continue
			}
			spec, err := resolve(settings)
			if err != nil {
				t.Fatalf("%s with its defaults: %v", id, err)
			}
			if spec.kind != b.Kind {
				t.Errorf("%s names its connection's kind %q, want %q", id, spec.kind, b.Kind)
			}
		}
	}
}
