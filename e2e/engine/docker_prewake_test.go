package engine

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// preWakeGlobal puts dicer_prewake before tls on every server (R5n).
const preWakeGlobal = `
servers {
	listener_wrappers {
		dicer_prewake
		tls
	}
}`

// preWakeDomain is the domain of the hosts these tests' containers claim:
// one certificate of Caddy's internal CA for *.preWakeDomain serves them
// all, so that a ClientHello orders nothing (on-demand TLS would: the
// permission's budgets for example.com, which the other tests' hosts
// share, would pay for a thousand ClientHellos, R7d).
const preWakeDomain = "prewake.test"

// preWakeSite routes the hosts under preWakeDomain by the containers'
// caddy.host labels.
var preWakeSite = fmt.Sprintf(`
https://*.%s {
	tls internal
	reverse_proxy {
		dynamic docker {
			port 8080
		}
	}
}`, preWakeDomain)

// preWakeHost is a host under preWakeDomain, unique to the run.
func preWakeHost(prefix string) string {
	return prefix + "-" + dockertest.RunID() + "." + preWakeDomain
}

// sendHello connects to Caddy's HTTPS port, sends a ClientHello naming
// host, and hangs up: no handshake, no request follows.
func sendHello(t *testing.T, hello []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
}

// runningAtMost replays the events of containers and returns the most
// that ran at once (start to die).
func runningAtMost(evs []events.Message) (most, starts int) {
	running := 0
	for _, m := range evs {
		switch m.Action {
		case events.ActionStart:
			running++
			starts++
		case events.ActionDie:
			running--
		}
		most = max(most, running)
	}
	return most, starts
}

// R5n: a ClientHello naming a stopped container's host starts it, with no
// request; a ClientHello is not use, so the container goes back on
// standby once its standby_after has passed.
func TestDocker_R5n_client_hello_wakes_and_is_not_use(t *testing.T) {
	cli := engine(t)
	host := preWakeHost("pw-one")
	app := dockertest.Name("pw-one")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "pw-one", NoStart: true,
		Labels: map[string]string{"app": app, "caddy.host": host, "caddy.standby_after": "2s"}})
	ev := testkit.WatchContainer(t, cli, c.ID)
	dockerCaddy(t, preWakeGlobal, preWakeSite)
	awaitState(t, c.Name, "standby")
	sent := time.Now()
	sendHello(t, testkit.ClientHello(t, host))
	started, ok := ev.Await(events.ActionStart, nil, waitFor)
	if !ok {
		t.Fatal("no start after a ClientHello naming the container's host")
	}
	stopped, ok := ev.Await(events.ActionDie, nil, waitFor)
	if !ok {
		t.Fatal("the container woken by a ClientHello alone stayed up")
	}
	if up := stopped.Sub(started); up < 2*time.Second {
		t.Errorf("back on standby %v after its start, before its standby_after (2s)", up)
	}
	t.Logf("ClientHello to start event %v; on standby again %v after it", started.Sub(sent).Round(time.Millisecond), stopped.Sub(started).Round(time.Millisecond))
}

// R5n: 1,000 ClientHellos from one client for 100 claimed hosts, none
// followed by a request, start at most client_wakes containers (4), at
// most max_wakes (4) waking at once, keep none up past its standby_after,
// and cost Caddy a bounded amount of memory.
func TestDocker_R5n_thousand_client_hellos(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("pw-many")
	const hosts = 100
	var names []string
	hello := make([][]byte, hosts)
	for i := range hosts {
		host := preWakeHost(fmt.Sprintf("pw-many%d", i))
		c := dockertest.Start(t, cli, dockertest.Options{Name: fmt.Sprintf("pw-many%d", i), NoStart: true,
			Labels: map[string]string{"app": app, "caddy.host": host, "caddy.standby_after": "2s"}})
		names = append(names, c.Name)
		hello[i] = testkit.ClientHello(t, host)
	}
	ev := testkit.WatchEvents(t, cli, filters.NewArgs(filters.Arg("type", "container"), filters.Arg("label", "app="+app)))
	dockerCaddy(t, preWakeGlobal, preWakeSite)
	for _, n := range names {
		awaitState(t, n, "standby")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 1000 {
		sendHello(t, hello[i%hosts])
	}
	// Every container started goes down again after its standby_after:
	// its start, 2 s, the idle loop's look and the Engine's stop, each
	// slower on a loaded machine (over 5 s in a CI run beside -race).
	testkit.Eventually(t, 20*time.Second, "every pre-woken container back on standby", func() bool {
		_, starts := runningAtMost(ev.All())
		return starts > 0 && ev.Count(events.ActionDie) == starts
	})
	// What the ClientHellos left behind, measured once the wakes they
	// began are over: a wake in flight holds its probes, inspections and
	// event decoding for a moment, more of them the slower a loaded
	// machine is (9 MiB measured right after the last hello in a
	// clean-clone run beside the e2e lane), and none of that stays.
	grew := int64(heap()) - int64(before)
	most, starts := runningAtMost(ev.All())
	if starts > 4 {
		t.Errorf("%d containers started by one client's ClientHellos, want at most client_wakes (4)", starts)
	}
	if most > 4 {
		t.Errorf("%d up at once, want at most max_wakes (4)", most)
	}
	if grew > 8<<20 {
		t.Errorf("Caddy's heap grew %d KiB over 1,000 ClientHellos", grew>>10)
	}
	t.Logf("1,000 ClientHellos for %d hosts: %d started, at most %d up at once, heap %+d KiB", hosts, starts, most, grew>>10)
}
