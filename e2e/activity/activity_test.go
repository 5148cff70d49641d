//go:build e2e && linux

package activity

import (
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// routes waits until p answers 200 for host (a request that counts: the
// container's idle clock starts).
func routes(t *testing.T, p *caddyProc, host string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "Caddy routes "+host, func() bool {
		a := p.get(host, "/", "curl/8", 2*time.Second)
		return a.err == nil && a.status == 200
	})
}

// downEvents counts the events that take a container down.
func downEvents(ev *testkit.Events) int {
	return ev.Count(events.ActionKill) + ev.Count(events.ActionStop) + ev.Count(events.ActionPause) + ev.Count(events.ActionDie)
}

// R5r: a container labelled caddy.standby_cpu=10 that keeps a core busy
// (the test image's /burn, which answers at once) with no request open
// is not stopped for twice its standby_after (8 s) since its last
// request; once the burn ends it goes on standby within standby_after.
// Without the label (main), Caddy stops it 8 s after the request.
func TestActivity_R5r_a_busy_container_is_not_stopped(t *testing.T) {
	const after, burn = 8 * time.Second, 24 * time.Second
	host := dockertest.Name("busy") + ".test"
	c := dockertest.Start(t, cli, dockertest.Options{Name: "busy", Labels: map[string]string{
		"caddy.host": host, "caddy.standby_after": after.String(), "caddy.standby_cpu": "10"}})
	ev := testkit.WatchContainer(t, cli, c.ID)
	p := newCaddy(t)
	routes(t, p, host)
	a := p.get(host, "/burn?for="+burn.String(), "curl/8", 5*time.Second)
	last := time.Now()
	if a.err != nil || a.status != 200 || !strings.HasPrefix(a.body, "burning") {
		t.Fatalf("/burn: %s", a)
	}
	burnEnds := last.Add(burn)
	for deadline := last.Add(2 * after); time.Now().Before(deadline); {
		if n := downEvents(ev); n != 0 {
			t.Fatalf("stopped %s after its last request, its CPU busy (%d down events)", time.Since(last).Round(100*time.Millisecond), n)
		}
		time.Sleep(100 * time.Millisecond) // poll the Engine's events for the window
	}
	t.Logf("no request for %s, a core busy: still up", (2 * after).String())
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", time.Until(burnEnds)+after+10*time.Second)
	killed, ok := ev.First(events.ActionKill, nil)
	if !ok {
		t.Fatal("exited with no kill event: not put on standby by Caddy")
	}
	t.Logf("on standby %s after its last request, %s after its CPU fell", killed.Sub(last).Round(100*time.Millisecond),
		killed.Sub(burnEnds).Round(100*time.Millisecond))
	if killed.Before(burnEnds) {
		t.Errorf("stopped %s before its burn ended", burnEnds.Sub(killed).Round(100*time.Millisecond))
	}
	if took := killed.Sub(burnEnds); took > after {
		t.Errorf("on standby %s after its CPU fell, want within standby_after (%s)", took, after)
	}
	if !strings.Contains(p.LogText(), "kept awake by its CPU") {
		t.Error("Caddy's log does not say the CPU kept it awake")
	}
}

// R5r: a monitor polling every second, by the User-Agent and by the path
// that caddy.standby_ignore names, keeps nothing awake: the container goes
// on standby standby_after (3 s) after its last other request, the
// monitor's requests proxied meanwhile; asleep, each poll gets 200 with
// `Dicer-State: asleep` and wakes nothing; the next other request wakes
// it. On main the polls keep it awake for good.
func TestActivity_R5r_a_monitor_keeps_nothing_awake_and_wakes_nothing(t *testing.T) {
	const after = 3 * time.Second
	host := dockertest.Name("monitored") + ".test"
	c := dockertest.Start(t, cli, dockertest.Options{Name: "monitored", Labels: map[string]string{
		"caddy.host": host, "caddy.standby_after": after.String(),
		"caddy.standby_ignore": "ua:TestMonitor, path:/ping"}})
	ev := testkit.WatchContainer(t, cli, c.ID)
	p := newCaddy(t)
	routes(t, p, host)
	lastReal := time.Now()
	monitor := func(i int) answer {
		if i%2 == 0 {
			return p.get(host, "/", "Mozilla/5.0 (compatible; TestMonitor/1.0)", 5*time.Second)
		}
		return p.get(host, "/ping", "curl/8", 5*time.Second)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	awake := 0
	var killed time.Time
	for i := 0; ; i++ {
		if at, ok := ev.First(events.ActionKill, nil); ok {
			killed = at
			break
		}
		if time.Since(lastReal) > 4*after {
			t.Fatalf("not on standby %s after the last request not ignored: the monitor's %d polls kept it awake",
				time.Since(lastReal).Round(100*time.Millisecond), i)
		}
		a := monitor(i)
		switch {
		case a.err == nil && a.status == 200 && strings.HasPrefix(a.body, "hello from"):
			awake++
		case a.err == nil && a.status == 200 && a.state == "asleep":
			// Caddy put it on standby: out of rotation before its stop
			// call, whose event may come a moment later.
			var ok bool
			if killed, ok = ev.Await(events.ActionKill, nil, 10*time.Second); !ok {
				t.Fatalf("poll %d answered asleep, and no kill event followed", i)
			}
		default:
			if _, ok := ev.First(events.ActionKill, nil); !ok {
				t.Fatalf("poll %d while up: %s, want the app's answer", i, a)
			}
		}
		if !killed.IsZero() {
			break
		}
		<-tick.C
	}
	t.Logf("on standby %s after the last request not ignored, %d monitor polls proxied meanwhile",
		killed.Sub(lastReal).Round(100*time.Millisecond), awake)
	if took := killed.Sub(lastReal); took > after+1500*time.Millisecond {
		t.Errorf("on standby %s after the last request not ignored, want standby_after (%s)", took, after)
	}
	if awake < 2 {
		t.Errorf("%d polls proxied while it was up, want them answered by the app", awake)
	}
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 15*time.Second)
	starts := ev.Count(events.ActionStart)
	for i := range 8 {
		a := monitor(i)
		if a.err != nil || a.status != 200 || a.state != "asleep" || !strings.HasPrefix(a.body, "asleep") {
			t.Errorf("poll %d while on standby: %s, want 200 with Dicer-State: asleep", i, a)
		}
		<-tick.C
	}
	if n := ev.Count(events.ActionStart) - starts; n != 0 {
		t.Fatalf("%d starts from the monitor's polls, want none", n)
	}
	if state := testkit.ContainerState(t, cli, c.ID); state != "exited" {
		t.Fatalf("the container is %s after the polls, want exited", state)
	}
	a := p.get(host, "/", "curl/8", 30*time.Second)
	if a.err != nil || a.status != 200 || !strings.HasPrefix(a.body, "hello from") {
		t.Fatalf("a request not ignored: %s, want it woken and served", a)
	}
}
