package rollout_test

import (
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
)

// A finding of the rollouts' end-to-end tests (R4f), mended: the latency
// verdict's p90 condition had no floor. TestSwarm_R4f_a_start_first_update_rolls_out_to_100
// rolled the same image (v2 is v1 with one more image label) back on a
// loaded machine with "step 50% failed: p99 latency 17ms over 1.5x the
// old version's 6ms (p90 2ms against 1ms), 220 requests": the p99 was
// over the factor and the 10 ms floor, and the p90, 1 ms more, over the
// factor too. A 1 ms move of a 1 ms body is a loaded host, not a slower
// release. These are that run's figures, through Advance: no rollback.
func TestRollout_R4f_a_1ms_p90_jitter_is_no_rollback(t *testing.T) {
	cfg, ok, warns := rollout.Parse(map[string]string{rollout.LabelRollout: "20%,50%,100% every 4s settle 1s min 30 wait 20s then stop"})
	if !ok || len(warns) != 0 {
		t.Fatalf("label: %v", warns)
	}
	start := time.Now()
	st := rollout.Begin("v1", "v2", cfg, start)
	var w rollout.Window
	var newer, old rollout.Counters
	sample := func(c *rollout.Counters) rollout.Sample {
		var s rollout.Sample
		c.AddTo(&s)
		return s
	}
	st, _ = rollout.Advance(st, &w, cfg, start.Add(cfg.Settle), 1, 1, sample(&newer), sample(&old)) // the window's base
	// The old version: a 1 ms body, its slowest 1.5% at 6 ms.
	for i := range 1000 {
		d := time.Millisecond
		if i >= 985 {
			d = 6 * time.Millisecond
		}
		old.Record(200, d)
	}
	// The new version, the same image: a 1 ms body, an eighth of it at
	// 2 ms (the scheduler of a loaded host), its five slowest at 17 ms.
	for i := range 220 {
		d := time.Millisecond
		switch {
		case i >= 215:
			d = 17 * time.Millisecond
		case i >= 190:
			d = 2 * time.Millisecond
		}
		newer.Record(200, d)
	}
	st, change := rollout.Advance(st, &w, cfg, start.Add(cfg.Every), 1, 1, sample(&newer), sample(&old))
	t.Logf("new %+v, old %+v: %s", st.NewFigures, st.OldFigures, st.Why)
	if change == rollout.Failed {
		t.Errorf("a healthy version rolled back on 1 ms of p90 (%s against %s): %s", st.NewFigures.P90, st.OldFigures.P90, st.Why)
	}
}
