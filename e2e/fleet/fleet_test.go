//go:build e2e && linux

package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// standbyApp creates a container of the test image for host <name>-<run>.test,
// labelled caddy.standby_after=3s, started unless asleep, and watches its
// Engine events.
func standbyApp(t *testing.T, name string, asleep bool) (dockertest.Container, *testkit.Events, string) {
	t.Helper()
	host := dockertest.Name(name) + ".test"
	c := dockertest.Start(t, cli, dockertest.Options{Name: name, NoStart: asleep,
		Labels: map[string]string{"caddy.host": host, "caddy.standby_after": "3s"}})
	return c, testkit.WatchContainer(t, cli, c.ID), host
}

// routes waits until p answers 200 for host.
func routes(t *testing.T, p *caddyProc, host string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "Caddy "+p.name+" routes "+host, func() bool {
		status, _, _, err := p.get(host, "/", 2*time.Second)
		return err == nil && status == 200
	})
}

// downEvents counts the events that take a container down.
func downEvents(ev *testkit.Events) int {
	return ev.Count(events.ActionKill) + ev.Count(events.ActionStop) + ev.Count(events.ActionPause) + ev.Count(events.ActionDie)
}

// R5m: a 12 s stream through Caddy A while Caddy B, whose last request
// to the container came before it, would have put it on standby 3 s
// later: the stream is whole, with no kill, stop or pause during it, and
// the container goes on standby within a few seconds after it ends.
func TestFleet_R5m_a_stream_through_one_Caddy_outlives_the_others_idle_clock(t *testing.T) {
	c, ev, host := standbyApp(t, "fleet-stream", false)
	storage := t.TempDir()
	a, b := newCaddy(t, "a", storage), newCaddy(t, "b", storage)
	routes(t, a, host)
	routes(t, b, host) // B's last request
	lastB := time.Now()
	start := time.Now()
	status, body, _, err := a.get(host, "/drip?n=60&every=200ms", 30*time.Second)
	ended := time.Now()
	if err != nil || status != 200 || body != strings.Repeat("x", 60) {
		t.Fatalf("the stream through A: %d, %d of 60 bytes, %v (after %s)", status, len(body), err, ended.Sub(start).Round(time.Millisecond))
	}
	if n := downEvents(ev); n != 0 {
		t.Fatalf("%d kill, stop, pause or die events during the stream", n)
	}
	t.Logf("a %s stream through A, B's last request %s before it began: whole, the container up throughout",
		ended.Sub(start).Round(time.Millisecond), start.Sub(lastB).Round(time.Millisecond))
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 15*time.Second)
	t.Logf("on standby %s after the stream ended", time.Since(ended).Round(100*time.Millisecond))
}

// R5m, the control: two Caddys that do not share a storage keep an idle
// clock each, and B stops the container in the middle of A's stream (what
// the test above would see without leases; the test image drains on
// SIGTERM, so the stream itself may finish, an app that does not would
// cut it).
func TestFleet_R5m_without_a_shared_storage_the_other_stops_it_mid_stream(t *testing.T) {
	_, ev, host := standbyApp(t, "fleet-apart", false)
	a, b := newCaddy(t, "a", t.TempDir()), newCaddy(t, "b", t.TempDir())
	routes(t, a, host)
	routes(t, b, host)
	start := time.Now()
	_, body, _, _ := a.get(host, "/drip?n=60&every=200ms", 30*time.Second)
	ended := time.Now()
	stopped, ok := ev.First(events.ActionKill, nil)
	if !ok || !stopped.Before(ended) {
		t.Fatalf("apart: no kill during the stream (%d of 60 bytes): want B's idle stop in its middle", len(body))
	}
	t.Logf("apart: B stopped the container %s into A's %s stream", stopped.Sub(start).Round(100*time.Millisecond), ended.Sub(start).Round(100*time.Millisecond))
}

// R5m: Caddy A killed with SIGKILL mid-stream holds the container awake
// no longer than its lease: B puts it on standby within the lease (4 s
// for standby_after 3s) plus standby_after of the kill.
func TestFleet_R5m_a_killed_Caddy_holds_nothing_past_its_lease(t *testing.T) {
	c, ev, host := standbyApp(t, "fleet-kill", false)
	storage := t.TempDir()
	a, b := newCaddy(t, "a", storage), newCaddy(t, "b", storage)
	routes(t, a, host)
	routes(t, b, host)
	go func() { _, _, _, _ = a.get(host, "/drip?n=300&every=100ms", time.Minute) }()
	deadline := time.Now().Add(5 * time.Second) // past B's idle time, the stream in flight: B holds off
	for time.Now().Before(deadline) {
		if n := downEvents(ev); n != 0 {
			t.Fatalf("%d down events while A streamed", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.Kill()
	killed := time.Now()
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 15*time.Second)
	took := time.Since(killed)
	t.Logf("on standby %s after A was killed mid-stream (bound: lease 4 s + standby_after 3 s)", took.Round(100*time.Millisecond))
	if took > 8*time.Second {
		t.Errorf("on standby %s after the kill, want within the lease plus standby_after (7 s, and a second of polling)", took)
	}
}

// R4e: three Caddys; a weight of 0 set through A: B and C send nothing to
// that instance within a second, and B still after it restarts; cleared
// through B, A sends to it again.
func TestFleet_R4e_a_weight_set_on_one_Caddy_holds_on_the_other(t *testing.T) {
	host := dockertest.Name("fleet-weight") + ".test"
	one := dockertest.Start(t, cli, dockertest.Options{Name: "fleet-w1", Labels: map[string]string{"caddy.host": host}})
	_ = dockertest.Start(t, cli, dockertest.Options{Name: "fleet-w2", Labels: map[string]string{"caddy.host": host}})
	storage := t.TempDir()
	a, b, c := newCaddy(t, "a", storage), newCaddy(t, "b", storage), newCaddy(t, "c", storage)
	served := func(p *caddyProc, n int) map[string]int {
		out := map[string]int{}
		for range n {
			if status, body, _, err := p.get(host, "/", 2*time.Second); err == nil && status == 200 {
				out[strings.TrimSpace(strings.TrimPrefix(body, "hello from "))]++
			}
		}
		return out
	}
	testkit.Eventually(t, 15*time.Second, "both Caddys route to both", func() bool {
		return len(served(a, 10)) == 2 && len(served(b, 10)) == 2 && len(served(c, 10)) == 2
	})
	if status, body := a.adminPost("/dicer/weight", `{"instance": "`+one.Name+`", "weight": 0}`); status != 200 {
		t.Fatalf("POST /dicer/weight through A: %d %s", status, body)
	}
	set := time.Now()
	testkit.Eventually(t, 1500*time.Millisecond, "B and C send nothing to "+one.Name, func() bool {
		gotB, gotC := served(b, 20), served(c, 20)
		return gotB["fleet-w1"] == 0 && gotB["fleet-w2"] == 20 && gotC["fleet-w1"] == 0 && gotC["fleet-w2"] == 20
	})
	t.Logf("B and C followed A's weight within %s", time.Since(set).Round(10*time.Millisecond))
	// B's admin API says the weight came through A (its instance ID, in
	// its data directory).
	aID, err := os.ReadFile(filepath.Join(a.Home, "caddy", "instance.uuid"))
	if err != nil {
		t.Fatal(err)
	}
	if list := b.adminGet("/dicer/instances"); !strings.Contains(list, `"runtime_weight_from": "`) || !strings.Contains(list, strings.TrimSpace(string(aID))) {
		t.Errorf("B's /dicer/instances does not say the weight came through A (%s):\n%s", aID, list)
	}
	b.Stop()
	b.start()
	testkit.Eventually(t, 15*time.Second, "B routes again after its restart", func() bool { return len(served(b, 1)) == 1 })
	testkit.Eventually(t, 1500*time.Millisecond, "B, restarted, still sends nothing to "+one.Name, func() bool {
		got := served(b, 20)
		return got["fleet-w1"] == 0 && got["fleet-w2"] == 20
	})
	if got := served(b, 40); got["fleet-w1"] != 0 {
		t.Fatalf("B, restarted, sent %d of 40 to the instance of weight 0", got["fleet-w1"])
	}
	if status, body := b.adminPost("/dicer/weight", `{"instance": "`+one.Name+`", "clear": true}`); status != 200 {
		t.Fatalf("POST /dicer/weight clear through B: %d %s", status, body)
	}
	testkit.Eventually(t, 1500*time.Millisecond, "A sends to "+one.Name+" again", func() bool { return served(a, 20)["fleet-w1"] > 0 })
	if got := served(a, 40); got["fleet-w1"] == 0 || got["fleet-w2"] == 0 {
		t.Errorf("A after the clear: %v, want both", got)
	}
}

// R5m: the shared storage unavailable for 10 s: no container is put on
// standby (one idle past its standby_after stays up), routes and wakes
// work, one log line; then back to normal: the idle container goes on
// standby.
func TestFleet_R5m_the_storage_away_for_10s_stops_nothing(t *testing.T) {
	c, ev, host := standbyApp(t, "fleet-away", false)
	_, _, sleeperHost := standbyApp(t, "fleet-asleep", true)
	storage := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	a := newCaddy(t, "a", storage)
	routes(t, a, host)
	// Away: the folder moved and a file in its place, so that every read
	// and write of the storage fails (root ignores permissions).
	if err := os.Rename(storage, storage+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storage, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	away := time.Now()
	for time.Since(away) < 8*time.Second { // idle past standby_after, twice
		if n := downEvents(ev); n != 0 {
			t.Fatalf("%d down events while the storage was away", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status, _, _, err := a.get(host, "/", 5*time.Second); err != nil || status != 200 {
		t.Fatalf("a request while the storage is away: %d %v", status, err)
	}
	if status, body, _, err := a.get(sleeperHost, "/", 20*time.Second); err != nil || status != 200 {
		t.Fatalf("a wake while the storage is away: %d %q %v", status, body, err)
	}
	for time.Since(away) < 10*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(a.LogText(), "the fleet's storage cannot be used"); n != 1 {
		t.Errorf("%d log lines about the storage, want 1", n)
	}
	if err := os.Remove(storage); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(storage+".away", storage); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 15*time.Second)
	t.Logf("on standby %s after the storage came back", time.Since(back).Round(100*time.Millisecond))
	if !strings.Contains(a.LogText(), "the fleet's storage works again") {
		t.Error("no line saying the storage works again")
	}
}
