//go:build e2e && linux

package dns

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/docker/docker/api/types/container"

	_ "github.com/caddy-dicer/caddy-dicer"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

func TestMain(m *testing.M) {
	// Every container its in-process Caddy sees is made by dockertest: it
	// follows this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(dockertest.Main(m))
}

const (
	zone     = "example.test"
	target   = "203.0.113.7"
	manualIP = "192.0.2.55"
	grace    = 3 * time.Second
)

// R7e through Caddy and the Docker Engine: a container claims
// app.example.test and dig at BIND answers its A record within a second of
// the container's start, with the owner TXT; a tenant's container claiming
// a name outside allow_suffix, and one claiming the name of a record made
// by hand, write nothing; the containers go, the record stays for the
// grace period and then goes, the hand-made one stays.
func TestDNS_R7e_container_claims_record_at_BIND(t *testing.T) {
	if os.Getenv("CADDY_DICER_DNS") == "" {
		t.Skip("needs root, BIND 9 (named), dig and the fixed addresses 10.216.0.5-6: make test-dns")
	}
	cli := dockertest.Client(t)
	bind := testkit.StartBIND(t, 1, zone, "manual IN A "+manualIP)
	dig := func(name, typ string) []string { return bind.Dig(t, name, typ) }
	loadCaddy(t, bind)

	start := time.Now()
	app := dockertest.Start(t, cli, dockertest.Options{Name: "dns-app", Labels: map[string]string{"caddy.host": "app." + zone}})
	started := time.Since(start)
	testkit.Eventually(t, time.Second+started, "app.example.test's A record at BIND", func() bool {
		return slices.Equal(dig("app."+zone, "A"), []string{target})
	})
	t.Logf("R7e: the A record answered %v after the container's create was sent (its create and start took %v)",
		time.Since(start).Round(time.Millisecond), started.Round(time.Millisecond))
	dockertest.Start(t, cli, dockertest.Options{Name: "dns-tenant", Labels: map[string]string{"caddy.host": "tenant." + zone}})
	hand := dockertest.Start(t, cli, dockertest.Options{Name: "dns-hand", Labels: map[string]string{"caddy.host": "manual." + zone}})
	if got := dig("_caddy-dicer.app."+zone, "TXT"); !slices.Equal(got, []string{`"heritage=caddy-dicer,owner=caddy-dicer,targets=` + target + `"`}) {
		t.Fatalf("owner TXT: %q", got)
	}
	// Give the other two claims a pass of their own before looking.
	time.Sleep(time.Second)
	if got := dig("tenant."+zone, "A"); len(got) != 0 {
		t.Fatalf("a claim outside allow_suffix got a record: %q", got)
	}
	if got := dig("manual."+zone, "A"); !slices.Equal(got, []string{manualIP}) {
		t.Fatalf("the hand-made record changed: %q", got)
	}
	if got := dig("_caddy-dicer.manual."+zone, "TXT"); len(got) != 0 {
		t.Fatalf("the hand-made record's name got an owner TXT: %q", got)
	}

	gone := time.Now()
	for _, c := range []dockertest.Container{app, hand} {
		if err := cli.ContainerRemove(t.Context(), c.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(grace / 2) // the grace period holds: nothing to wait for
	if got := dig("app."+zone, "A"); !slices.Equal(got, []string{target}) {
		t.Fatalf("the record went within the grace period: %q", got)
	}
	testkit.Eventually(t, grace+3*time.Second, "app.example.test's records removed after the grace period", func() bool {
		return len(dig("app."+zone, "A")) == 0 && len(dig("_caddy-dicer.app."+zone, "TXT")) == 0
	})
	t.Logf("R7e: the record went %v after the container was removed (grace %v)", time.Since(gone).Round(time.Millisecond), grace)
	if got := dig("manual."+zone, "A"); !slices.Equal(got, []string{manualIP}) {
		t.Fatalf("the hand-made record did not survive: %q", got)
	}
}

// loadCaddy runs, in this process, a Caddy whose only app is tls with an
// on-demand `permission docker` publishing dns_records to bind, its
// storage and data in the test's temporary directory, without admin
// endpoint or listener; it stops at the test's end.
func loadCaddy(t *testing.T, bind testkit.BIND) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"storage": map[string]any{"module": "file_system", "root": dir + "/storage"},
		"apps": map[string]any{"tls": map[string]any{"automation": map[string]any{"on_demand": map[string]any{
			"permission": map[string]any{
				"module":       "docker",
				"address":      dockertest.EngineHost(),
				"allow_suffix": []string{"app." + zone, "manual." + zone},
				"dns_records": map[string]any{
					"provider":  map[string]any{"name": "rfc2136", "server": bind.Server + ":53", "key_name": bind.KeyName, "key": bind.Key},
					"zones":     []string{zone},
					"addresses": []string{target},
					"grace":     grace.String(),
				},
			},
		}}}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatalf("loading Caddy: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
}
