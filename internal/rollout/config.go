// Package rollout is the state machine of progressive rollouts (R4f): given
// the versions of a route, the time and each version's counters, it says
// the new version's share, when a step passes or fails, and when the old
// version is drained. It is pure: no clock, no storage, no Caddy; the
// root feeds it and applies its shares as runtime weights (R4c, R4e).
package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// The labels of a rollout (R4f), read from the new version's instances.
const (
	// LabelRollout turns rollouts on for the instances' route: `true`, or
	// `<steps> [every <d>] [settle <d>] [min <n>] [wait <d>] [then
	// proceed|stop]`, such as `5%,25%,50%,100% every 1m`.
	LabelRollout = catalog.LabelRollout
	// LabelVersion names the instance's version; default its image.
	LabelVersion = catalog.LabelVersion
	// LabelMaxErrors is how many percentage points the new version's
	// error rate may exceed the old one's: `1%` (the default), `0.5%`.
	LabelMaxErrors = catalog.LabelRolloutMaxErrors
	// LabelMaxLatency is how many times the old version's p99 latency the
	// new one's may be: `1.5x` (the default), `2x`.
	LabelMaxLatency = catalog.LabelRolloutMaxLatency
)

// Bounds of the settings.
const (
	MaxSteps      = 10
	MaxVersionLen = 128
	MinEvery      = time.Second
	MaxEvery      = 24 * time.Hour
	MaxMin        = 1_000_000
)

// Config is a rollout's settings.
type Config struct {
	// Steps are the new version's shares, in percent, strictly growing,
	// the last 100.
	Steps []int
	// Every is a step's time; Settle the start of a step whose requests
	// are discarded.
	Every, Settle time.Duration
	// Min is the fewest requests of the new version a window is judged
	// on; Wait how long past a step's end it waits for them, and Proceed
	// whether it then passes the step unjudged (else it holds).
	Min     int
	Wait    time.Duration
	Proceed bool
	// MaxErrors is the error rate, in percentage points, the new version
	// may have over the old one's; MaxLatency the factor its p99 may be
	// of the old one's.
	MaxErrors  float64
	MaxLatency float64
}

// Default is `caddy.rollout=true`.
func Default() Config {
	return Config{
		Steps: []int{5, 25, 50, 100}, Every: time.Minute, Settle: 10 * time.Second,
		Min: 100, Wait: 10 * time.Minute, MaxErrors: 1, MaxLatency: 1.5,
	}
}

// Parse reads the labels of a rollout. ok is false when labels have no
// caddy.rollout (or `false`); err names the label at fault: a bad
// caddy.rollout starts no rollout, a bad threshold is the default (the
// caller warns with warn).
func Parse(labels map[string]string) (cfg Config, ok bool, warn []error) {
	v, has := labels[LabelRollout]
	if !has || strings.TrimSpace(v) == "false" {
		return Config{}, false, nil
	}
	cfg, err := parseRollout(v)
	if err != nil {
		return Config{}, false, []error{err}
	}
	if s, has := labels[LabelMaxErrors]; has {
		f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
		if err != nil || !(f >= 0 && f <= 100) || !strings.HasSuffix(strings.TrimSpace(s), "%") {
			warn = append(warn, setting.Errorf(LabelMaxErrors, "%q is not a percentage from 0%% to 100%%, such as 1%%: the default 1%% applies", clip(s)))
		} else {
			cfg.MaxErrors = f
		}
	}
	if s, has := labels[LabelMaxLatency]; has {
		t := strings.TrimSpace(s)
		f, err := strconv.ParseFloat(strings.TrimSuffix(t, "x"), 64)
		switch {
		case err == nil && !strings.HasSuffix(t, "x"):
			// A bare number could be read as a factor, a percentage or
			// milliseconds: the x says which, as the % of max errors does.
			warn = append(warn, setting.Errorf(LabelMaxLatency, "%q has no x: a factor is written with it, such as %sx: the default 1.5x applies", clip(s), clip(t)))
		case err != nil || !(f >= 1 && f <= 100): // NaN fails both
			warn = append(warn, setting.Errorf(LabelMaxLatency, "%q is not a factor from 1x to 100x, such as 1.5x: the default 1.5x applies", clip(s)))
		default:
			cfg.MaxLatency = f
		}
	}
	return cfg, true, warn
}

// clip bounds a tenant's value in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func parseRollout(v string) (Config, error) {
	cfg := Default()
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, setting.Errorf(LabelRollout, "%q: "+format, append([]any{clip(v)}, a...)...)
	}
	if len(v) > 256 {
		return bad("over 256 bytes")
	}
	words := strings.Fields(v)
	if len(words) == 0 {
		return bad("empty; `true` or steps such as `5%%,25%%,50%%,100%% every 1m`")
	}
	if words[0] != "true" {
		cfg.Steps = nil
		for _, p := range strings.Split(words[0], ",") {
			n, err := strconv.Atoi(strings.TrimSuffix(p, "%"))
			if err != nil || !strings.HasSuffix(p, "%") || n < 1 || n > 100 {
				return bad("step %q is not a percentage from 1%% to 100%%", clip(p))
			}
			if len(cfg.Steps) > 0 && n <= cfg.Steps[len(cfg.Steps)-1] {
				return bad("steps must grow: %d%% after %d%%", n, cfg.Steps[len(cfg.Steps)-1])
			}
			cfg.Steps = append(cfg.Steps, n)
		}
		if len(cfg.Steps) > MaxSteps {
			return bad("over %d steps", MaxSteps)
		}
		if cfg.Steps[len(cfg.Steps)-1] != 100 {
			return bad("the last step must be 100%%")
		}
	}
	settleSet := false
	for i := 1; i < len(words); i += 2 {
		if i+1 >= len(words) {
			return bad("%q has no value", words[i])
		}
		key, val := words[i], words[i+1]
		switch key {
		case "every", "settle", "wait":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > MaxEvery {
				return bad("%s %q is not a duration up to 24h", key, clip(val))
			}
			switch key {
			case "every":
				if d < MinEvery {
					return bad("every %s is under 1s", d)
				}
				cfg.Every = d
			case "settle":
				cfg.Settle, settleSet = d, true
			default:
				cfg.Wait = d
			}
		case "min":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > MaxMin {
				return bad("min %q is not a count from 1 to %d", clip(val), MaxMin)
			}
			cfg.Min = n
		case "then":
			switch val {
			case "proceed":
				cfg.Proceed = true
			case "stop":
				cfg.Proceed = false
			default:
				return bad("then %q is neither proceed nor stop", clip(val))
			}
		default:
			return bad("unknown word %q (every, settle, min, wait, then)", clip(key))
		}
	}
	if !settleSet && cfg.Settle >= cfg.Every {
		cfg.Settle = cfg.Every / 6 // the default settle of a short step
	}
	if cfg.Settle >= cfg.Every {
		return bad("settle %s is not under every %s", cfg.Settle, cfg.Every)
	}
	return cfg, nil
}

// String is the config as the label would say it.
func (c Config) String() string {
	steps := make([]string, len(c.Steps))
	for i, s := range c.Steps {
		steps[i] = strconv.Itoa(s) + "%"
	}
	then := "stop"
	if c.Proceed {
		then = "proceed"
	}
	return fmt.Sprintf("%s every %s settle %s min %d wait %s then %s",
		strings.Join(steps, ","), c.Every, c.Settle, c.Min, c.Wait, then)
}
