//go:build e2e && linux

package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// Churn without a lost request on a Dicer host (R1a, R6): the rolling
// replacement of a three-instance site under constant load, with the
// reverse_proxy settings README recommends for deploys. On the simulator an
// instance is recorded running as soon as its process is spawned (before it
// listens) and a stop kills it at once, with requests in flight: readiness
// and Caddy's retries must cover both.

// churnSite is proxySite with the zero-downtime settings.
func churnSite(h dicerHost, host, selector string) string {
	return fmt.Sprintf(`
http://%s {
	reverse_proxy {
		%s
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}
`, host, dynamic(h, selector, guestPort))
}

// startLoad sends requests for host from several clients, back to back,
// counting answers 200 by body and every failure.
func startLoad(c *caddyProc, host string, clients int) *testkit.Load {
	return testkit.StartLoad(clients, func() testkit.Result {
		r := c.get(host)
		return testkit.Result{Status: r.status, Body: r.body, Err: r.err}
	}, func(r testkit.Result) bool { return r.Is(http.StatusOK, "") })
}

func TestE2E_churn_rolling_replacement_loses_no_request(t *testing.T) {
	h := newHost(t)
	labels := map[string]string{"app": "roll"}
	var old []string
	for i := 1; i <= 3; i++ {
		old = append(old, h.run(t, instance{name: fmt.Sprintf("roll-old-%d", i), labels: labels}))
	}
	c := startCaddy(t, "", churnSite(h, "roll.test", "app=roll"))
	l := startLoad(c, "roll.test", 4)
	defer l.Stop()
	for _, n := range old {
		eventually(t, n+" serves", func() bool { return l.Served(hello(n)) > 0 })
	}
	for i, o := range old {
		n := h.run(t, instance{name: fmt.Sprintf("roll-new-%d", i+1), labels: labels})
		before := l.Served(hello(n))
		eventually(t, n+" serves", func() bool { return l.Served(hello(n)) > before })
		h.stop(t, o)
	}
	eventually(t, "5,000 requests answered", func() bool { return l.Total() >= 5000 })
	l.Stop()
	failed, failures := l.Failed()
	t.Logf("%d requests, %d failed, answered by %v", l.Total(), failed, l.Bodies())
	if failed > 0 {
		t.Errorf("%d requests failed, want none: %q", failed, failures)
	}
}
