package engine

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R2g through Caddy, as TestMain scopes this package
// (CADDY_DICER_FOLLOW=caddy-dicer.test.run=<RunID>): a stopped container
// labelled for scale to zero by another test run (another RunLabel value),
// which this route's selector matches and which comes first by name, is
// invisible: not in the catalog, never woken; the run's own is.
func TestDocker_R2g_another_runs_container_is_invisible(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("fw")
	labels := func(run string) map[string]string {
		l := map[string]string{"app": app, "caddy.standby_after": "1h"}
		if run != "" {
			l[dockertest.RunLabel] = run
		}
		return l
	}
	// "fw-a-other" sorts before "fw-b-ours": seen, it would be the one
	// woken (R5.2).
	other := dockertest.Start(t, cli, dockertest.Options{Name: "fw-a-other", NoStart: true, Labels: labels("another-run-" + dockertest.RunID())})
	ours := dockertest.Start(t, cli, dockertest.Options{Name: "fw-b-ours", NoStart: true, Labels: labels("")})
	ev := testkit.WatchContainer(t, cli, other.ID)
	dockerCaddy(t, "", standbySite(app, ""))
	awaitListed(t, app)

	var list []diceradmin.InstanceStatus
	adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
	if len(list) != 1 || list[0].ID != ours.ID {
		t.Errorf("instances of app=%s: %+v, want %s's only", app, list, ours.Name)
	}
	woken(t, hostName("fw"), http.StatusOK, hello("fw-b-ours"))
	if got := ev.Count(events.ActionStart); got != 0 || testkit.ContainerState(t, cli, other.ID) != "created" {
		t.Errorf("another run's container: %d start events, state %s; want it never started", got, testkit.ContainerState(t, cli, other.ID))
	}
}
