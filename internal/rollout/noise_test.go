package rollout

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A finding of the second hostile review (R4f): the error verdict
// compared the two versions' rates as they came, judged at every look
// from the first `min` requests on, with no allowance for chance. Where
// both versions fail alike (a flaky dependency, or an outsider sending a
// request both versions answer 500), the new version's rate over its few
// requests (5% of them at the first step) swings by several points: a
// healthy version was rolled back most of the time. The verdict now
// fails only past max_errors and three standard errors of the
// difference, so equal versions pass whatever their common rate, and a
// worse one still fails at its first step.
func TestRollout_R4f_equal_error_rates_roll_back_nothing_by_chance(t *testing.T) {
	cfg := Default()
	trial := func(rng *rand.Rand, pOld, pNew float64) bool { // rolled back at the first step?
		t0 := time.Unix(1_000_000, 0)
		st, w := Begin("v1", "v2", cfg, t0), Window{}
		var nw, old Sample
		for sec := 1; sec <= int(cfg.Every/time.Second); sec++ {
			for range 200 { // 200 requests a second, 5% to the new version
				s, p := &old, pOld
				if rng.IntN(100) < st.Share() {
					s, p = &nw, pNew
				}
				s.Requests++
				s.Buckets[5]++
				if rng.Float64() < p {
					s.Errors++
				}
			}
			var ch Change
			st, ch = Advance(st, &w, cfg, t0.Add(time.Duration(sec)*time.Second), 1, 1, nw, old)
			if ch == Failed {
				return true
			}
			if ch != Nothing {
				return false
			}
		}
		return false
	}
	rng := rand.New(rand.NewPCG(46, 4))
	for _, p := range []float64{0.02, 0.2, 0.5} {
		failed := 0
		for range 200 {
			if trial(rng, p, p) {
				failed++
			}
		}
		if failed > 4 { // 2%
			t.Errorf("both versions failing %.0f%% of requests: the healthy one rolled back in %d of 200 rollouts; want at most 4", 100*p, failed)
		}
	}
	for _, c := range []struct{ pOld, pNew float64 }{{0, 0.03}, {0, 0.2}, {0.02, 0.2}, {0.2, 0.4}} {
		failed := 0
		for range 50 {
			if trial(rng, c.pOld, c.pNew) {
				failed++
			}
		}
		if failed < 49 {
			t.Errorf("old %.0f%%, new %.0f%% errors: rolled back at the first step in %d of 50; want every one", 100*c.pOld, 100*c.pNew, failed)
		}
	}
}
