package rollout

import (
	"math"
	"testing"
)

// A tenant's threshold that is not a number (strconv.ParseFloat reads
// "NaN" in any case) compares false with everything: such a rollout would
// never fail a step. It is refused like any bad threshold: the default
// applies and one warning names the label.
func TestRollout_R4f_thresholds_refuse_NaN(t *testing.T) {
	for _, v := range []string{"NaN%", "nan%", " NaN %", "+NaN%"} {
		cfg, ok, warn := Parse(map[string]string{LabelRollout: "true", LabelMaxErrors: v})
		if !ok || math.IsNaN(cfg.MaxErrors) || cfg.MaxErrors != Default().MaxErrors || len(warn) != 1 {
			t.Errorf("%s=%q: max errors %v, %d warnings", LabelMaxErrors, v, cfg.MaxErrors, len(warn))
		}
	}
	for _, v := range []string{"NaN", "NaNx", "nanx", "-NaNx"} {
		cfg, ok, warn := Parse(map[string]string{LabelRollout: "true", LabelMaxLatency: v})
		if !ok || math.IsNaN(cfg.MaxLatency) || cfg.MaxLatency != Default().MaxLatency || len(warn) != 1 {
			t.Errorf("%s=%q: max latency %v, %d warnings", LabelMaxLatency, v, cfg.MaxLatency, len(warn))
		}
	}
}
