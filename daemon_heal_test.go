package caddydicer

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// heal_max_restarts (R1e) is a positive integer of a Docker connection,
// in the Caddyfile as in JSON; a bad value names the setting.
func TestHeal_R1e_heal_max_restarts_setting(t *testing.T) {
	u := new(DockerUpstreams)
	if err := u.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dynamic docker {\n\theal_max_restarts 3\n}")); err != nil {
		t.Fatal(err)
	}
	if u.HealMaxRestarts != 3 {
		t.Errorf("HealMaxRestarts = %d, want 3", u.HealMaxRestarts)
	}
	for _, bad := range []string{"0", "-1", "many"} {
		err := new(DockerUpstreams).UnmarshalCaddyfile(caddyfile.NewTestDispenser("dynamic docker {\n\theal_max_restarts " + bad + "\n}"))
		if err == nil || !strings.Contains(err.Error(), "heal_max_restarts") {
			t.Errorf("heal_max_restarts %s: %v, want an error naming the setting", bad, err)
		}
	}
}
