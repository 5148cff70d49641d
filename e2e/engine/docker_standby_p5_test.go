package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// P5: the wake overhead of scale to zero: request-to-200 through Caddy
// minus the container's own start-to-ready, over 10 wakes, in stop and in
// pause mode. A measurement, not an assertion: it runs only with
// CADDY_DICER_P5=1 and logs the table.
//
// Stop mode: the overhead of a wake is the time from the moment the app
// began to listen (its helloserver says when, on the same clock) to the
// 200 at the client, plus Caddy's own reaction before its start call (no
// I/O: microseconds): the container's start time, which varies by
// ±100 ms from one start to the next, is not in it. Pause mode: the app
// listens all along, so each wake through Caddy is paired with an unpause
// made directly, its published port polled every millisecond.
//
//	CADDY_DICER_P5=1 go test -count=1 -run TestDocker_Standby_P5 -v .
func TestDocker_Standby_P5_wake_overhead(t *testing.T) {
	if os.Getenv("CADDY_DICER_P5") == "" {
		t.Skip("a measurement: set CADDY_DICER_P5=1")
	}
	cli := engine(t)
	var rows []string
	for _, mode := range []string{"stop", "pause"} {
		app := dockertest.Name("p5-" + mode)
		c := dockertest.Start(t, cli, dockertest.Options{Name: "p5-" + mode, Ports: []string{"127.0.0.1::8080"},
			Labels: map[string]string{"app": app, "caddy.standby_after": "1h", "caddy.standby": mode}})
		tester, _ := dockerCaddy(t, "", standbySite(app, ""))
		host := hostName("p5-" + mode)
		answersWithin(t, tester, host, http.StatusOK, hello("p5-"+mode), waitFor)
		var own, through, overhead []time.Duration
		for range 10 {
			if mode == "pause" {
				down(t, cli, c, mode)
				start := time.Now()
				up(t, cli, c, mode)
				pollReady(t, dockertest.PublishedAddr(t, cli, c, "8080/tcp"), start)
				own = append(own, time.Since(start))
			}
			down(t, cli, c, mode)
			// The catalog has followed the daemon's event: else the
			// request may go to the paused container and hang.
			daemonState := map[string]string{"stop": "stopped", "pause": "paused"}[mode]
			eventually(t, "Caddy's catalog shows "+c.Name+" "+daemonState, func() bool {
				var list []diceradmin.InstanceStatus
				adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
				return len(list) == 1 && list[0].DaemonState == daemonState && list[0].State == "standby"
			})
			start := time.Now()
			r, _ := getRetry(host, "/", 30*time.Second)
			answered := time.Now()
			if r.err != nil || r.status != http.StatusOK {
				t.Fatalf("%s: %s", mode, r)
			}
			through = append(through, answered.Sub(start))
			if mode == "pause" {
				overhead = append(overhead, through[len(through)-1]-own[len(own)-1])
				continue
			}
			l, _ := getRetry(host, "/listening", 10*time.Second)
			ns, err := strconv.ParseInt(strings.TrimSpace(l.body), 10, 64)
			if l.err != nil || err != nil {
				t.Fatalf("/listening: %s", l)
			}
			listening := time.Unix(0, ns)
			own = append(own, listening.Sub(start))
			overhead = append(overhead, answered.Sub(listening))
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s |", mode,
			median(own), median(through), median(overhead), slices.Max(overhead)))
		t.Logf("%s: overheads %v", mode, overhead)
		down(t, cli, c, "stop")
	}
	t.Logf("\n| mode | container's own start to ready, median | request to 200 through Caddy, median | wake overhead, median | max |\n|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}

// pollReady waits until addr answers 200, polling every millisecond.
func pollReady(t *testing.T, addr string, start time.Time) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		status, _, err := dockertest.Get(ctx, addr, "/")
		cancel()
		if err == nil && status == http.StatusOK {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s: not ready 30 s after it was woken directly", addr)
		}
		time.Sleep(time.Millisecond)
	}
}

// down stops or pauses c, directly.
func down(t *testing.T, cli *client.Client, c dockertest.Container, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if mode == "pause" {
		err = cli.ContainerPause(ctx, c.ID)
		waitState(t, cli, c, "paused", 10*time.Second)
	} else {
		timeout := 0
		err = cli.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &timeout})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// up starts or unpauses c, directly.
func up(t *testing.T, cli *client.Client, c dockertest.Container, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if mode == "pause" {
		err = cli.ContainerUnpause(ctx, c.ID)
	} else {
		err = cli.ContainerStart(ctx, c.ID, container.StartOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
}
