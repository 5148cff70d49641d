//go:build e2e && linux

package e2e

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Standby and Caddy's keep-alive (R5): Caddy keeps connections to an
// upstream open and reuses them, and a guest frozen on standby answers none
// of them; only a new connection to the published port wakes it. These
// scenarios use Caddy's default transport (keep-alive on) and check that
// the request after each standby wakes the instance instead of hanging.

// requestTimeout bounds one request here: a request sent on a connection to
// the frozen guest hangs, and this is how long we give it.
const requestTimeout = 5 * time.Second

// getWithin sends GET http://<host>/ to Caddy, giving up after
// requestTimeout.
func (c *caddyProc) getWithin(host string) result {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return c.getContext(ctx, host)
}

// roundsOr is the number of rounds of a keep-alive scenario: $E2E_ROUNDS
// if set (to compare mechanisms over more rounds), else n.
func roundsOr(n int) int {
	if r, err := strconv.Atoi(os.Getenv("E2E_ROUNDS")); err == nil && r > 0 {
		return r
	}
	return n
}

// report logs the median and max of the wake overheads (time to 200 minus
// the simulator's wake delay).
func report(t *testing.T, what string, overheads []time.Duration) {
	t.Helper()
	if len(overheads) == 0 {
		return
	}
	s := slices.Clone(overheads)
	slices.Sort(s)
	t.Logf("%s: first request after standby, time to 200 minus the %s wake delay, over %d rounds: median %s, max %s",
		what, wakeDelay, len(s), s[len(s)/2].Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond))
}

func TestE2E_R5_standby_wake_survives_keep_alive(t *testing.T) {
	h := newHost(t)
	requireSim(t, h)
	name := h.run(t, instance{name: "sleepy", labels: map[string]string{"app": "sleepy"}, publish: true, standbyAfter: time.Minute})
	c := startCaddy(t, "", proxySite(h, "sleepy.test", "app=sleepy", guestPort))

	rounds := roundsOr(10)
	var overheads []time.Duration
	for round := 1; round <= rounds; round++ {
		// Served while running: Caddy now holds a kept-alive connection.
		if r := c.getWithin("sleepy.test"); r.err != nil || r.status != http.StatusOK || r.body != hello(name) {
			t.Fatalf("round %d, request while running: %v, want 200 %q", round, r, hello(name))
		}
		awaitRotation(t, c, leaves, name, func() { h.standby(t, name) })
		wakes := len(wokenEvents(h.events(t, name)))
		r := c.getWithin("sleepy.test")
		if r.err != nil || r.status != http.StatusOK || r.body != hello(name) {
			t.Fatalf("round %d, first request after standby: %v after %s, want 200 %q (a request on a connection kept alive from before the standby hangs)",
				round, r, r.took.Round(time.Millisecond), hello(name))
		}
		if n := len(wokenEvents(h.events(t, name))); n != wakes+1 {
			t.Fatalf("round %d: %d wakes by a connection, want %d", round, n, wakes+1)
		}
		overheads = append(overheads, r.took-wakeDelay)
		// Wait until Caddy knows it runs again, so the next standby is one.
		eventually(t, "caddy sees "+name+" running again", func() bool {
			return c.count(joins, map[string]string{"instance": name}) > round
		})
	}
	report(t, "one instance", overheads)
}

// With several instances on the route, one on standby and the others
// running, requests keep going to the running ones without a hang; once
// they are gone, the next request wakes the one on standby.
func TestE2E_R5_standby_wake_survives_keep_alive_beside_running_instances(t *testing.T) {
	h := newHost(t)
	requireSim(t, h)
	sleepy := h.run(t, instance{name: "mix-a-sleepy", labels: map[string]string{"app": "mix"}, publish: true, standbyAfter: time.Minute})
	awake := h.run(t, instance{name: "mix-b-awake", labels: map[string]string{"app": "mix"}})
	c := startCaddy(t, "", proxySite(h, "mix.test", "app=mix", guestPort))

	var overheads []time.Duration
	rounds := roundsOr(3)
	for round := 1; round <= rounds; round++ {
		// Both serve, each over a kept-alive connection.
		expectEven(t, c, "mix.test", 3, sleepy, awake)
		awaitRotation(t, c, leaves, sleepy, func() { h.standby(t, sleepy) })
		for i := range 6 {
			if r := c.getWithin("mix.test"); r.err != nil || r.status != http.StatusOK || r.body != hello(awake) {
				t.Fatalf("round %d, request %d with %s on standby: %v, want 200 %q", round, i+1, sleepy, r, hello(awake))
			}
		}
		awaitRotation(t, c, leaves, awake, func() { h.stop(t, awake) })
		r := c.getWithin("mix.test")
		if r.err != nil || r.status != http.StatusOK || r.body != hello(sleepy) {
			t.Fatalf("round %d, first request with only %s left, on standby: %v after %s, want 200 %q",
				round, sleepy, r, r.took.Round(time.Millisecond), hello(sleepy))
		}
		overheads = append(overheads, r.took-wakeDelay)
		awaitRotation(t, c, joins, awake, func() { h.start(t, awake) })
		eventually(t, "caddy sees "+sleepy+" running again", func() bool {
			return c.count(joins, map[string]string{"instance": sleepy}) > round
		})
	}
	report(t, "beside a running instance", overheads)
}
