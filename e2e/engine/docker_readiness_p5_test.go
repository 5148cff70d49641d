package engine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// P5, R1a/R1b: the common case of the readiness probe on the real Engine.
// A container whose app listens at once is started 20 times, in turns
// with the probe at its unlearnt pace and at the pace it learnt of the
// image (R1a, readiness's learned.go); each time,
// the Engine's start event to the first 200 through Caddy (Caddy polled
// without a pause), split at the moment the app began to listen (its
// helloserver says when, on the same clock), with the probe's attempts and
// its time from the catalog's Put to the accepted connection (Caddy's
// debug log). README's "container start event to first 200, median of 10".
// A measurement, not an assertion:
//
//	CADDY_DICER_P5=1 go test -count=1 -run TestDocker_Readiness_P5 -v .
func TestDocker_Readiness_P5_start_event_to_first_200(t *testing.T) {
	if os.Getenv("CADDY_DICER_P5") == "" {
		t.Skip("a measurement: set CADDY_DICER_P5=1")
	}
	cli := engine(t)
	app := dockertest.Name("rp5")
	host := hostName("rp5")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "rp5", Labels: map[string]string{"app": app}, NoStart: true})
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(filters.Arg("container", c.ID)))
	evs := ev.All
	const rounds = 20
	conn := openConnection("docker", "")
	t.Cleanup(func() { conn.SetUnlearntPace(false) })
	var answered, listening, routed []time.Time
	var pollTook []time.Duration // a 503 answered to the client's poll, per round on average
	for round := range rounds {
		conn.SetUnlearntPace(round%2 == 0)
		up(t, cli, c, "stop")
		deadline := time.Now().Add(30 * time.Second)
		var polls int
		var polling time.Duration
		for {
			pollStart := time.Now()
			if r := request(tester, host, time.Second); r.err == nil && r.status == http.StatusOK {
				break
			}
			polls, polling = polls+1, polling+time.Since(pollStart)
			if time.Now().After(deadline) {
				t.Fatal("not answered 30 s after its start")
			}
			runtime.Gosched() // poll the condition, at once: a sleep of 200 µs lasts a millisecond here
		}
		answered = append(answered, time.Now())
		if polls > 0 {
			pollTook = append(pollTook, polling/time.Duration(polls))
		}
		l, _ := getRetry(host, "/listening", 10*time.Second)
		ns, err := strconv.ParseInt(strings.TrimSpace(l.body), 10, 64)
		if l.err != nil || err != nil {
			t.Fatalf("/listening: %s", l)
		}
		listening = append(listening, time.Unix(0, ns))
		fr, _ := getRetry(host, "/first-request", 10*time.Second)
		fns, err := strconv.ParseInt(strings.TrimSpace(fr.body), 10, 64)
		if fr.err != nil || err != nil {
			t.Fatalf("/first-request: %s", fr)
		}
		routed = append(routed, time.Unix(0, fns))
		down(t, cli, c, "stop")
		for r := request(tester, host, time.Second); r.status == http.StatusOK; r = request(tester, host, time.Second) {
			if time.Now().After(deadline) {
				t.Fatal("still answered 30 s after its stop")
			}
			time.Sleep(time.Millisecond) // poll the condition
		}
	}
	testkit.UntilEvery(5*time.Second, 10*time.Millisecond, func() bool { return ev.Count(events.ActionStart) >= rounds })
	var starts []time.Time
	for _, m := range evs() {
		if m.Action == events.ActionStart {
			starts = append(starts, time.Unix(0, m.TimeNano))
		}
	}
	if len(starts) != rounds {
		t.Fatalf("%d start events, want %d", len(starts), rounds)
	}
	var attempts []int
	var putToAccepted, listenToAccepted []time.Duration
	for i, line := range testkit.LogLines(t, logFile, `"msg":"instance accepts connections"`, `"instance":"`+c.Name+`"`) {
		var e struct {
			TS       float64
			Attempts int
			After    float64
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if i < rounds {
			attempts = append(attempts, e.Attempts)
			putToAccepted = append(putToAccepted, time.Duration(e.After*float64(time.Second)))
			listenToAccepted = append(listenToAccepted, time.Unix(0, int64(e.TS*1e9)).Sub(listening[i]))
		}
	}
	joins := logTimes(t, logFile, "instance joins rotation", c.Name)
	if len(attempts) < rounds || len(joins) < rounds {
		t.Fatalf("%d probe verdicts and %d joins logged, want %d", len(attempts), len(joins), rounds)
	}
	row := func(what string, phase int, f func(i int) time.Duration) string {
		var ds []time.Duration
		for i := phase; i < rounds; i += 2 {
			ds = append(ds, f(i))
		}
		return fmt.Sprintf("| %s | %s | %s |", what, median(ds).Round(10*time.Microsecond), slices.Max(ds).Round(10*time.Microsecond))
	}
	for phase, name := range []string{"unlearnt pace (before)", "learnt pace (after)"} {
		var n []int
		for i := phase; i < rounds; i += 2 {
			n = append(n, attempts[i])
		}
		t.Logf("\n%s, %d starts | median | max |\n|---|---|---|\n%s\n%s\n%s\n%s\n%s\n%s\n%s\nprobe attempts per start: %v", name, rounds/2,
			row("start event to first 200", phase, func(i int) time.Duration { return answered[i].Sub(starts[i]) }),
			row("start event to the app listening", phase, func(i int) time.Duration { return listening[i].Sub(starts[i]) }),
			row("app listening to first 200", phase, func(i int) time.Duration { return answered[i].Sub(listening[i]) }),
			row("app listening to the first request routed to it (R1a; the app's clock)", phase, func(i int) time.Duration { return routed[i].Sub(listening[i]) }),
			row("probe: catalog Put to accepted", phase, func(i int) time.Duration { return putToAccepted[i] }),
			row("probe: app listening to accepted (log time)", phase, func(i int) time.Duration { return listenToAccepted[i] }),
			row("joins rotation (log time) to first 200", phase, func(i int) time.Duration { return answered[i].Sub(joins[i]) }),
			n)
	}
	if len(pollTook) > 0 {
		t.Logf("the client's poll of Caddy while nothing is routable (a 503): %v median of the rounds' averages", median(pollTook).Round(time.Microsecond))
	}
}
