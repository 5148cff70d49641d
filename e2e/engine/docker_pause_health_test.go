package engine

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R1c: a container with a health check, on pause standby, is routed as
// soon as it is resumed, not a health interval later. The Engine marks a
// paused container unhealthy and keeps the mark after the unpause until
// its next check (15 s here): a wake took that long before.
func TestDocker_R1c_paused_container_with_health_check_wakes_at_once(t *testing.T) {
	s := newStandbyCase(t, "r1c-pause", dockertest.Options{Health: dockertest.HealthCheck(15*time.Second, 0),
		Labels: map[string]string{"caddy.standby_after": "1h", "caddy.standby": "pause"}}, "")
	cli, c, app, host, tester := s.cli, s.c, s.app, s.host, s.tester
	waitHealthyWithin(t, cli, c, 40*time.Second)
	answersWithin(t, tester, host, http.StatusOK, hello("r1c-pause"), waitFor)

	took := pauseAndWake(t, cli, tester, c, app, host, 10*time.Second)
	if took > 5*time.Second {
		t.Fatalf("the resumed container answered after %s, want within a few seconds (its health interval is 15 s)", took)
	}
	t.Logf("woken from pause in %s", took.Round(time.Millisecond))
}

// pauseAndWake pauses c directly, waits until Caddy's catalog shows it
// paused, then sends one request for host (giving up after timeout) and
// returns how long it took to get c's 200; a failure fails t.
func pauseAndWake(t *testing.T, cli *client.Client, tester *caddytest.Tester, c dockertest.Container, app, host string, timeout time.Duration) time.Duration {
	t.Helper()
	down(t, cli, c, "pause")
	eventually(t, "Caddy's catalog shows "+c.Name+" paused", func() bool {
		var list []diceradmin.InstanceStatus
		adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
		return len(list) == 1 && list[0].DaemonState == "paused" && list[0].State == "standby"
	})
	start := time.Now()
	r, _ := getRetry(host, "/", timeout)
	took := time.Since(start)
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("the request that wakes %s: %s after %s", c.Name, r, took.Round(time.Millisecond))
	}
	return took
}

// The wake latency of pause standby for a container with a health check
// of interval 2 s, 15 s and 30 s: request to 200 through Caddy, 3 wakes
// each. A measurement, not an assertion: it runs only with
// CADDY_DICER_P5=1 and logs the table.
//
//	CADDY_DICER_P5=1 go test -count=1 -run TestDocker_R1c_P5 -v .
func TestDocker_R1c_P5_pause_wake_latency_by_health_interval(t *testing.T) {
	if os.Getenv("CADDY_DICER_P5") == "" {
		t.Skip("a measurement: set CADDY_DICER_P5=1")
	}
	cli := engine(t)
	intervals := []time.Duration{2 * time.Second, 15 * time.Second, 30 * time.Second}
	var site strings.Builder
	type subject struct {
		c         dockertest.Container
		app, host string
	}
	var subjects []subject
	for _, iv := range intervals {
		name := fmt.Sprintf("r1c-p5-%ds", int(iv.Seconds()))
		app := dockertest.Name(name)
		c := dockertest.Start(t, cli, dockertest.Options{Name: name, Health: dockertest.HealthCheck(iv, 0),
			Labels: map[string]string{"app": app, "caddy.standby_after": "1h", "caddy.standby": "pause"}})
		subjects = append(subjects, subject{c, app, hostName(name)})
		site.WriteString(fmt.Sprintf("@%s host %s\nhandle @%s {\n\treverse_proxy {\n\t\tdynamic docker {\n\t\t\tselector app=%s\n\t\t\tport 8080\n\t\t}\n\t}\n}\n",
			name, hostName(name), name, app))
	}
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(":%d {\n%s}", httpPort, site.String()))
	var rows []string
	for i, s := range subjects {
		awaitListed(t, s.app)
		waitHealthyWithin(t, cli, s.c, 2*intervals[i]+10*time.Second)
		answersWithin(t, tester, s.host, http.StatusOK, hello(strings.TrimPrefix(s.c.Name, dockertest.Name(""))), waitFor)
		var took []time.Duration
		for range 3 {
			took = append(took, pauseAndWake(t, cli, tester, s.c, s.app, s.host, 2*intervals[i]+10*time.Second))
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", intervals[i], median(took).Round(time.Millisecond), slicesMax(took).Round(time.Millisecond)))
		t.Logf("interval %s: %v", intervals[i], took)
	}
	t.Logf("\n| health interval | wake from pause, request to 200, median of 3 | max |\n|---|---|---|\n%s", strings.Join(rows, "\n"))
}

// waitHealthyWithin waits up to d until the Engine says c is healthy.
func waitHealthyWithin(t *testing.T, cli *client.Client, c dockertest.Container, d time.Duration) {
	t.Helper()
	testkit.WaitHealth(t, cli, c.ID, c.Name, "healthy", d)
}

func slicesMax(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = max(m, d)
	}
	return m
}
