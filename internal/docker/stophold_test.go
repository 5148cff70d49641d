package docker

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// TestStopSignalHoldIsBounded (R6e): a container that gets a stop signal
// (`docker kill -s TERM`) and keeps running is held out of its rotations
// for its stop timeout plus a margin, then fetched again and, still
// running, brought back (Started), logged once; one that dies after the
// signal stays out. On e790bcf the first stayed out until it restarted.
func TestStopSignalHoldIsBounded(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	one := 1
	// The helloserver drains on SIGTERM and exits EXIT_DELAY after it: for
	// the length of this test it is a container that ignored its signal.
	stays := dockertest.Start(t, cli, dockertest.Options{Name: "hold-stays", Labels: tc.labels(),
		Env: []string{"EXIT_DELAY=120s"}, StopTimeout: &one})
	dies := dockertest.Start(t, cli, dockertest.Options{Name: "hold-dies", Labels: tc.labels(), StopTimeout: &one})

	a, err := New(Config{Pace: follow.Pace{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	const margin = 500 * time.Millisecond
	a.stopMargin = margin
	sink, logs := followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool {
		return v.ByID[stays.ID].State == catalog.StateRunning && v.ByID[dies.ID].State == catalog.StateRunning
	})

	for _, c := range []dockertest.Container{stays, dies} {
		if err := cli.ContainerKill(ctx(t), c.ID, "TERM"); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	waitUntil(t, eventTimeout, "both held out at the signal", func() bool { return sink.IsStopping(stays.ID) && sink.IsStopping(dies.ID) })
	sink.WaitFor(t, waitTimeout, "the one that died, stopped", func(v view) bool { return v.ByID[dies.ID].State == catalog.StateStopped })
	waitUntil(t, waitTimeout, "the one still running back in rotation", func() bool { return !sink.IsStopping(stays.ID) })
	t.Logf("back in rotation %v after the signal (stop timeout 1s + margin %v)", time.Since(killed).Round(time.Millisecond), margin)
	if in := inspect(t, cli, stays.ID); in.State == nil || !in.State.Running {
		t.Fatal("the container stopped after all: the test proves nothing")
	}
	if sink.Snapshot().ByID[stays.ID].State != catalog.StateRunning {
		t.Error("the container still running is not running in the sink")
	}
	entries := logs.FilterMessageSnippet("still running after its stop signal").All()
	if len(entries) != 1 || entries[0].ContextMap()["id"] != stays.ID {
		t.Errorf("want one log naming the container that ignored its signal; got %d:\n%s", len(entries), followtest.DumpLogs(logs))
	}
	if entries := logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(entries) != 0 {
		t.Errorf("errors logged:\n%s", followtest.DumpLogs(logs))
	}
}
