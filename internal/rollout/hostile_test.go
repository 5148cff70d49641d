package rollout

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
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

// caddy.rollout_max_latency is a factor written with its x (`1.5x`), as
// caddy.rollout_max_errors is a percentage written with its %: a bare
// number (`2`, which an operator may mean as 2 ms, 2% or 2x) is refused
// with one warning naming the label and saying the x is missing, and the
// default applies.
func TestRollout_R4f_max_latency_needs_its_x(t *testing.T) {
	for _, v := range []string{"2", " 2 ", "1.5", "3.0"} {
		cfg, ok, warn := Parse(map[string]string{LabelRollout: "true", LabelMaxLatency: v})
		var se *setting.Error
		if !ok || cfg.MaxLatency != Default().MaxLatency || len(warn) != 1 || !errors.As(warn[0], &se) ||
			se.Setting != LabelMaxLatency || !strings.Contains(warn[0].Error(), "no x") {
			t.Errorf("%s=%q: max latency %v, warnings %v; want the default and one warning naming the label and the x",
				LabelMaxLatency, v, cfg.MaxLatency, warn)
		}
	}
	for v, want := range map[string]float64{"2x": 2, " 2x ": 2, "1.25x": 1.25, "100x": 100} {
		cfg, ok, warn := Parse(map[string]string{LabelRollout: "true", LabelMaxLatency: v})
		if !ok || cfg.MaxLatency != want || len(warn) != 0 {
			t.Errorf("%s=%q: max latency %v, warnings %v; want %g", LabelMaxLatency, v, cfg.MaxLatency, warn, want)
		}
	}
}
