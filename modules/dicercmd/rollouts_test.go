package dicercmd

import (
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// `caddy dicer rollouts` shows a route's rollouts per hosts (R4f), and
// says why one is refused (no room in the fleet's record) or waits (its
// weights cannot be written: the switches record is full).
func TestRollouts_R4f_table_shows_hosts_and_what_blocks(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	list := []diceradmin.RolloutStatus{
		{Route: "app=shop", Hosts: "a.example", State: rollout.State{Old: "v1", New: "v2", Steps: []int{20, 100}, Verdict: rollout.Rolling,
			StepStart: now.Add(-5 * time.Second)}, Share: 20, Blocked: "its weights are not written: full; its step waits"},
		{Route: "app=shop", Hosts: "b.example", State: rollout.State{Old: "b1", New: "b2"}, Blocked: "no rollout recorded: 1000 rollouts under way"},
		{Route: "app=web", State: rollout.State{Old: "w1", New: "w2", Steps: []int{100}, Verdict: rollout.Done, Ended: now.Add(-time.Minute)},
			Share: 100, Drained: true},
	}
	var b strings.Builder
	if err := printRollouts(&b, list, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"HOSTS", "a.example", "blocked: its weights are not written", "b.example", "refused",
		"blocked: no rollout recorded", "done (old drained)", "*"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}
