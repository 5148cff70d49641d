package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// A container joining (created, connected, started, its check passing)
// costs at most one inspection per event it sends and no listing: the
// Engine calls per join, logged for the Engine at hand (make
// test-engine29 runs it against Docker 29 beside 20.10).
func TestJoinCost(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	sv, err := cli.ServerVersion(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter()
	sink, _ := start(t, Config{}, c)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })

	for _, tt := range []struct {
		name   string
		health bool
		// events a join sends: create, network connect, start, and with a
		// check health_status: healthy.
		events int
	}{{"plain", false, 3}, {"health check", true, 4}} {
		opts := dockertest.Options{Name: "join-" + strings.ReplaceAll(tt.name, " ", "-"), Labels: tc.labels()}
		if tt.health {
			opts.Health = dockertest.HealthCheck(100*time.Millisecond, 0)
		}
		ctr := dockertest.Start(t, cli, opts)
		want := catalog.HealthNone
		if tt.health {
			want = catalog.HealthHealthy
		}
		sink.WaitFor(t, eventTimeout, tt.name+": running and "+want.String(), func(v view) bool {
			in := v.ByID[ctr.ID]
			return in.State == catalog.StateRunning && in.Health == want && len(in.Networks) == 1 && in.Networks[0].Address != ""
		})
		// Events are applied in order: once a rename made after the join
		// is seen, every event of the join has been applied.
		renamed := dockertest.Name("joined-" + strings.ReplaceAll(tt.name, " ", "-"))
		if err := cli.ContainerRename(ctx(t), ctr.ID, renamed); err != nil {
			t.Fatal(err)
		}
		sink.WaitFor(t, eventTimeout, "rename", func(v view) bool { return v.ByID[ctr.ID].Name == renamed })
		n := c.inspectsOf(ctr.ID)[ctr.ID] - 1 // the rename's
		c.mu.Lock()
		lists := c.lists
		c.mu.Unlock()
		t.Logf("calls per join (%s): %d inspections, %d listings beyond the first; Engine %s, API %s (client %s)",
			tt.name, n, lists-1, sv.Version, sv.APIVersion, cli.ClientVersion())
		if n < 1 || n > tt.events {
			t.Errorf("%s: %d inspections for a join, want 1 to %d (one per event at most)", tt.name, n, tt.events)
		}
		if lists != 1 {
			t.Errorf("%s: %d listings, want the first only", tt.name, lists)
		}
	}
}
