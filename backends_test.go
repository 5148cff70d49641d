package caddydicer

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/adminapi"
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
	got := backends()
	if len(got) != len(want) {
		t.Errorf("backends %v, want the kinds of %v", got, want)
	}
	for _, b := range got {
		if w, ok := want[b.kind]; !ok || b.upstreams != w[0] || b.permission != w[1] {
			t.Errorf("backend %+v, want modules %v", b, w)
		}
	}
}

// TestBackends_every_list_shows_every_backend: each place that lists
// backends to a user lists every registered one, so a new backend (Swarm
// was once left out) is never missing from one.
func TestBackends_every_list_shows_every_backend(t *testing.T) {
	var cmd cobra.Command
	dicerCommand(&cmd)
	var daemons, explain bytes.Buffer
	if err := printDaemons(&daemons, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := printExplanation(&explain, adminapi.Explanation{Host: "a.example"}); err != nil {
		t.Fatal(err)
	}
	emptyDaemons := new(DaemonsPermission).Provision(caddy.Context{})
	unknownDaemon := new(DaemonsPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("daemons {\n podman\n}"))
	emptyBlock := new(DaemonsPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("daemons {\n}"))
	lists := map[string]struct {
		text      string
		namespace string // the backends it lists: those with a module there ("": all)
	}{
		"caddy dicer help":                    {cmd.Short, ""},
		"caddy dicer daemons, none":           {daemons.String(), ""},
		"caddy dicer explain, no route":       {explain.String(), upstreamsNamespace},
		"permission daemons, none (JSON)":     {emptyDaemons.Error(), permissionNamespace},
		"permission daemons, unknown daemon":  {unknownDaemon.Error(), permissionNamespace},
		"permission daemons, no daemon block": {emptyBlock.Error(), permissionNamespace},
	}
	for where, list := range lists {
		kinds := backendKinds(list.namespace)
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

func TestBackends_sentences(t *testing.T) {
	for _, tc := range []struct {
		kinds      []string
		one, every string
	}{
		{nil, "", ""},
		{[]string{"dicer"}, "dicer", "dicer"},
		{[]string{"dicer", "docker"}, "dicer or docker", "dicer and docker"},
		{[]string{"dicer", "docker", "swarm"}, "dicer, docker or swarm", "dicer, docker and swarm"},
	} {
		if got := oneOf(tc.kinds); got != tc.one {
			t.Errorf("oneOf(%q) = %q, want %q", tc.kinds, got, tc.one)
		}
		if got := allOf(tc.kinds); got != tc.every {
			t.Errorf("allOf(%q) = %q, want %q", tc.kinds, got, tc.every)
		}
	}
}

// TestBackends_kind_names_the_connection: a backend's upstream source
// names its connections (metrics, the admin API, logs) by the backend's
// kind. (Its permission embeds the same daemon settings.)
func TestBackends_kind_names_the_connection(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for _, b := range backends() {
		for _, id := range []caddy.ModuleID{b.upstreams} {
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
			if spec.kind != b.kind {
				t.Errorf("%s names its connection's kind %q, want %q", id, spec.kind, b.kind)
			}
		}
	}
}
