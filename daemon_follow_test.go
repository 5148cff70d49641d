package caddydicer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// followKey is the adapter key (identity[0]) a module's settings resolve
// into at provision, the environment as it is then, and the Engine key
// its standby state is shared by.
func followKey(t *testing.T, d daemonSettings) (key, engine string) {
	t.Helper()
	spec, err := d.spec()
	if err != nil {
		t.Fatal(err)
	}
	return spec.identity[0], spec.standbyEngine
}

// R2g: the follow setting's default is CADDY_DICER_FOLLOW when it is set
// and not empty, read at provision; an explicit setting beats it; unset
// or empty, every container. Told by the connection's key, which the
// selector shapes (a connection per selector), while the Engine's key,
// its scale-to-zero state's, stays one (R5f).
func TestDocker_R2g_follow_default_from_the_environment(t *testing.T) {
	host := "unix:///nonexistent/docker.sock"
	docker := func(follow string) *DockerEngine {
		return &DockerEngine{EngineConnection: EngineConnection{Address: host}, Follow: follow}
	}
	t.Setenv(FollowEnv, "")
	all, allEngine := followKey(t, docker(""))
	abc, abcEngine := followKey(t, docker("cdt.run=abc"))
	prod, _ := followKey(t, docker("env=prod"))
	if all == abc {
		t.Fatal("a follow selector did not change the connection's key")
	}
	if allEngine != abcEngine {
		t.Error("a follow selector changed the Engine's key: two standby states for one Engine's containers (R5f)")
	}

	t.Setenv(FollowEnv, "cdt.run=abc")
	if got, _ := followKey(t, docker("")); got != abc {
		t.Error("CADDY_DICER_FOLLOW=cdt.run=abc is not the default: the key is not that of follow cdt.run=abc")
	}
	if got, _ := followKey(t, docker("env=prod")); got != prod {
		t.Error("an explicit follow setting did not beat CADDY_DICER_FOLLOW")
	}
	t.Setenv(FollowEnv, "  ")
	if got, _ := followKey(t, docker("")); got != all {
		t.Error("a blank CADDY_DICER_FOLLOW is not every container")
	}

	// Swarm alike.
	swarm := func(follow string) *SwarmManager {
		return &SwarmManager{EngineConnection: EngineConnection{Address: host}, Follow: follow}
	}
	t.Setenv(FollowEnv, "")
	swarmAll, _ := followKey(t, swarm(""))
	swarmABC, _ := followKey(t, swarm("cdt.run=abc"))
	swarmProd, _ := followKey(t, swarm("env=prod"))
	t.Setenv(FollowEnv, "cdt.run=abc")
	if got, _ := followKey(t, swarm("")); got != swarmABC || got == swarmAll {
		t.Error("swarm: CADDY_DICER_FOLLOW is not the default")
	}
	if got, _ := followKey(t, swarm("env=prod")); got != swarmProd {
		t.Error("swarm: an explicit follow setting did not beat CADDY_DICER_FOLLOW")
	}
}

// R2g: a bad follow selector is an error naming follow: at adapt (a
// literal in the Caddyfile, caddyfile_test.go's cases, or in JSON, by
// validateStatic), and at provision, where the environment's is read,
// naming the variable too.
func TestSettingError_R2g_bad_follow(t *testing.T) {
	t.Setenv(FollowEnv, "")
	for _, tc := range []struct {
		json string
		mod  interface {
			caddy.Provisioner
			caddy.CleanerUpper
			validateStatic() error
		}
	}{
		{`{"follow":"env in prod"}`, new(DockerUpstreams)},
		{`{"follow":"=prod"}`, new(DockerPermission)},
		{`{"follow":"tier in ()"}`, new(SwarmUpstreams)},
		{`{"follow":"env in (a"}`, new(SwarmPermission)},
	} {
		if err := json.Unmarshal([]byte(tc.json), tc.mod); err != nil {
			t.Fatal(err)
		}
		var se *SettingError
		if err := tc.mod.validateStatic(); !errors.As(err, &se) || se.Setting != "follow" {
			t.Errorf("%T %s: adapt's error %v; want one naming follow", tc.mod, tc.json, err)
		}
		ctx, cancel := newLoad(t)
		err := tc.mod.Provision(ctx)
		cancel()
		if err == nil {
			_ = tc.mod.Cleanup()
		}
		if !errors.As(err, &se) || se.Setting != "follow" {
			t.Errorf("%T %s: provision's error %v; want one naming follow", tc.mod, tc.json, err)
		}
	}

	t.Setenv(FollowEnv, "env in prod")
	for _, d := range []daemonSettings{&DockerEngine{}, &SwarmManager{}} {
		_, err := d.spec()
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != "follow" || !strings.Contains(err.Error(), FollowEnv) {
			t.Errorf("%T with a bad %s: error %v; want one naming follow and the variable", d, FollowEnv, err)
		}
		if err := d.validateStatic(); err != nil {
			t.Errorf("%T: adapt refused the environment's selector, which is read at provision: %v", d, err)
		}
	}
}

// R2g: `follow` in the Caddyfile takes the rest of the line as one
// selector, spaces and all.
func TestCaddyfile_R2g_follow(t *testing.T) {
	for _, tc := range []struct {
		input string
		mod   caddyfile.Unmarshaler
	}{
		{input: "docker {\n follow tier in (a, b),env=prod\n}", mod: new(DockerUpstreams)},
		{input: "docker {\n follow tier in (a, b),env=prod\n}", mod: new(DockerPermission)},
		{input: "swarm {\n follow tier in (a, b),env=prod\n}", mod: new(SwarmUpstreams)},
		{input: "swarm {\n follow tier in (a, b),env=prod\n}", mod: new(SwarmPermission)},
	} {
		if err := tc.mod.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input)); err != nil {
			t.Fatalf("%q: %v", tc.input, err)
		}
		var got string
		switch m := tc.mod.(type) {
		case *DockerUpstreams:
			got = m.Follow
		case *DockerPermission:
			got = m.Follow
		case *SwarmUpstreams:
			got = m.Follow
		case *SwarmPermission:
			got = m.Follow
		}
		if got != "tier in (a, b),env=prod" {
			t.Errorf("%T %q: follow %q", tc.mod, tc.input, got)
		}
	}
}
