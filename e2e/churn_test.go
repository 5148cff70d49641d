//go:build e2e && linux

package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
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

// loadCounter sends requests for a host from several clients, back to back,
// counting answers by body and every failure.
type loadCounter struct {
	mu       sync.Mutex
	bodies   map[string]int
	failures []string
	failed   int
	quit     chan struct{}
	wg       sync.WaitGroup
}

func startLoad(c *caddyProc, host string, clients int) *loadCounter {
	l := &loadCounter{bodies: map[string]int{}, quit: make(chan struct{})}
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.quit:
					return
				default:
				}
				r := c.get(host)
				l.mu.Lock()
				if r.err == nil && r.status == http.StatusOK {
					l.bodies[r.body]++
				} else {
					l.failed++
					if len(l.failures) < 10 {
						l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+r.String())
					}
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *loadCounter) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	l.wg.Wait()
}

func (l *loadCounter) served(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bodies[hello(name)]
}

func (l *loadCounter) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.failed
	for _, c := range l.bodies {
		n += c
	}
	return n
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
	defer l.stop()
	for _, n := range old {
		eventually(t, n+" serves", func() bool { return l.served(n) > 0 })
	}
	for i, o := range old {
		n := h.run(t, instance{name: fmt.Sprintf("roll-new-%d", i+1), labels: labels})
		before := l.served(n)
		eventually(t, n+" serves", func() bool { return l.served(n) > before })
		h.stop(t, o)
	}
	eventually(t, "5,000 requests answered", func() bool { return l.total() >= 5000 })
	l.stop()
	t.Logf("%d requests, %d failed, answered by %v", l.total(), l.failed, l.bodies)
	if l.failed > 0 {
		t.Errorf("%d requests failed, want none: %q", l.failed, l.failures)
	}
}
