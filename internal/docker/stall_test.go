package docker

import (
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// TestStalledStreamIsDetected (issue 19 item 4): a socket proxy freezes
// the open connections (the event stream among them: open, nothing
// flowing) while the Engine still answers new ones. A container stopped
// and another started meanwhile reach the sink within Resync +
// ResyncTimeout + StallGrace and a reconnection; the stall is logged; the
// new session follows events again. On e790bcf nothing re-lists: the
// stopped container stays running in the sink for as long as the freeze.
func TestStalledStreamIsDetected(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	proxy := dockertest.NewFreezableProxy(t)
	old := dockertest.Start(t, cli, dockertest.Options{Name: "stall-old", Labels: tc.labels()})

	const resync, resyncTimeout, grace = time.Second, 2 * time.Second, 500 * time.Millisecond
	sink, logs := start(t, Config{Host: proxy.Host(), Resync: resync, ResyncTimeout: resyncTimeout, StallGrace: grace}, nil)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool {
		return v.ByID[old.ID].State == catalog.StateRunning
	})

	if n := proxy.Freeze(); n == 0 {
		t.Fatal("no connection to freeze")
	}
	frozenAt := time.Now()
	if err := cli.ContainerStop(ctx(t), old.ID, stopTimeout()); err != nil {
		t.Fatal(err)
	}
	fresh := dockertest.Start(t, cli, dockertest.Options{Name: "stall-new", Labels: tc.labels()})
	// Detection takes Resync + StallGrace (a re-listing through a new
	// connection) or Resync + ResyncTimeout (one through a frozen idle
	// connection), then a reconnection; the deadline is generous for a
	// loaded machine, the time taken is logged.
	bound := 30 * time.Second
	defer func() {
		if t.Failed() {
			t.Log(followtest.DumpLogs(logs))
		}
	}()
	sink.WaitFor(t, bound, "the stopped container out and the new one in, through the frozen stream", func(v view) bool {
		return v.ByID[old.ID].State == catalog.StateStopped && v.ByID[fresh.ID].State == catalog.StateRunning
	})
	t.Logf("the sink was right %v after the freeze (Resync %v, ResyncTimeout %v, StallGrace %v)",
		time.Since(frozenAt).Round(time.Millisecond), resync, resyncTimeout, grace)
	// Said once: a stall, or a re-listing that could not get through.
	followtest.WaitLog(t, logs, waitTimeout, zapcore.WarnLevel, "")
	warned := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("connection to the Docker Engine stalled").Len()
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		t.Logf("warned: %s %v", e.Message, e.ContextMap()["error"])
	}
	if warned == 0 {
		t.Errorf("the stall was not logged; logs:\n%s", followtest.DumpLogs(logs))
	}
	waitLog(t, logs, zapcore.InfoLevel, "reconnected to the Docker Engine")

	// The new session follows events again.
	if err := cli.ContainerPause(ctx(t), fresh.ID); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "an event after the reconnection", func(v view) bool {
		return v.ByID[fresh.ID].State == catalog.StatePaused
	})
	_ = cli.ContainerUnpause(ctx(t), fresh.ID)
}
