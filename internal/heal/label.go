package heal

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Bounds of a caddy.heal value (a tenant writes it): a duration from
// minAfter to maxAfter, or a count of health checks from 1 to maxCount.
const (
	minAfter    = time.Second
	maxAfter    = 24 * time.Hour
	maxCount    = 1000
	maxLabelLen = 32
)

// spec is a parsed caddy.heal: how long unhealthy (after), or for how
// many health checks (count, times the container's check interval).
type spec struct {
	after time.Duration
	count int
}

// parseSpec reads a caddy.heal value: a count (`3`) or a Go duration
// (`30s`), within the bounds above; the error names the label.
func parseSpec(raw string) (spec, error) {
	v := strings.TrimSpace(raw)
	if len(v) > maxLabelLen {
		return spec{}, fmt.Errorf("%s: value longer than %d bytes", catalog.LabelHeal, maxLabelLen)
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > maxCount {
			return spec{}, fmt.Errorf("%s: %q is a count of health checks out of 1 to %d", catalog.LabelHeal, v, maxCount)
		}
		return spec{count: n}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return spec{}, fmt.Errorf("%s: %q is neither a count of health checks (e.g. 3) nor a duration (e.g. 30s)", catalog.LabelHeal, v)
	}
	if d < minAfter || d > maxAfter {
		return spec{}, fmt.Errorf("%s: %q is out of %s to %s", catalog.LabelHeal, v, minAfter, maxAfter)
	}
	return spec{after: d}, nil
}

// afterFor is how long a container with this spec stays unhealthy before
// its restart, its health check's interval given (a count), at most
// maxAfter.
func (s spec) afterFor(interval time.Duration) time.Duration {
	if s.count == 0 {
		return s.after
	}
	if interval <= 0 || interval > maxAfter {
		interval = DefaultInterval
	}
	return min(time.Duration(s.count)*interval, maxAfter)
}

// DefaultInterval is the Engine's health check interval when the check
// sets none.
const DefaultInterval = 30 * time.Second
