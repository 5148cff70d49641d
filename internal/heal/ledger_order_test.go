package heal

import (
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1e: a restart ends at the container's next verdict even when the
// Engine's events of the restart (stopped, then starting) reach the
// catalog before the restart call's answer, as they did on a loaded
// machine: the container unhealthy again is restarted after its backoff,
// not held back as in progress for restartWatch (2 min). Both orders of
// the next verdict: after the answer, and before it too.
func TestLedger_R1e_restart_ends_at_its_verdict_when_events_beat_the_answer(t *testing.T) {
	for _, verdictFirst := range []bool{false, true} {
		l := NewLedger()
		hosts := []string{"shop.example.com"}
		t0 := time.Unix(1_000_000, 0)
		inst := func(state catalog.State, health catalog.Health) catalog.Instance {
			return catalog.Instance{ID: "a", Name: "app-a", State: state, Health: health}
		}
		if c := l.claim("a", hosts, time.Second, 6, t0, t0); c.verdict != claimed {
			t.Fatalf("first claim: verdict %d, want claimed", c.verdict)
		}
		// The call runs; the Engine's events of the restart come first.
		l.observe(inst(catalog.StateStopped, catalog.HealthNone), t0.Add(500*time.Millisecond))
		l.observe(inst(catalog.StateRunning, catalog.HealthStarting), t0.Add(time.Second))
		if verdictFirst {
			l.observe(inst(catalog.StateRunning, catalog.HealthUnhealthy), t0.Add(1500*time.Millisecond))
		}
		l.done("a", false, t0.Add(2*time.Second))
		if !verdictFirst {
			l.observe(inst(catalog.StateRunning, catalog.HealthUnhealthy), t0.Add(3*time.Second))
		}
		// Its backoff after one restart is 2 s; at 5 s it is due again.
		at := t0.Add(5 * time.Second)
		if c := l.claim("a", hosts, time.Second, 6, t0.Add(3*time.Second), at); c.verdict != claimed {
			t.Errorf("verdict before the answer %v: second claim at 5 s: verdict %d, want claimed (%d: the first restart still counted in progress)",
				verdictFirst, c.verdict, busy)
		}
	}
}
