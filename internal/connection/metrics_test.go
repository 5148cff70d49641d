package connection

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestWakeCounters: each wake result has its own series on the daemon, so
// that a wake path (Docker: start or unpause) counts what its wake came to
// beside Dicer's requests to instances on standby.
func TestWakeCounters(t *testing.T) {
	m := newConnMetrics("docker", "unix:///test-wakes.sock")
	// The counters are the process's: the test counts what its run adds
	// to them, so that go test -count=N passes too.
	before := map[string]float64{}
	for _, result := range []string{WakeRequested, string(standby.WakeReady), string(standby.WakeTooSlow), string(standby.WakeDenied)} {
		before[result] = counterValue(t, metrics.wakes.WithLabelValues("docker", "unix:///test-wakes.sock", result))
	}
	for i, result := range []string{WakeRequested, string(standby.WakeReady), string(standby.WakeTooSlow), string(standby.WakeDenied)} {
		for range i + 1 {
			m.wakes(result).Inc()
		}
	}
	for i, result := range []string{WakeRequested, string(standby.WakeReady), string(standby.WakeTooSlow), string(standby.WakeDenied)} {
		if got := counterValue(t, metrics.wakes.WithLabelValues("docker", "unix:///test-wakes.sock", result)) - before[result]; got != float64(i+1) {
			t.Errorf("wakes{result=%s} = %v, want %d", result, got, i+1)
		}
	}
}
