package swarm

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// R2g: a tenant on the manager's Engine who runs a plain container
// labelled com.docker.swarm.task.id=<a followed task's ID> (labels anyone
// can write; task IDs anyone can read) does not decide that task's state:
// a task's container is the one Swarm says it is (its ContainerStatus),
// not whichever container carries its labels. Else an exited look-alike
// takes a followed task out of every rotation for as long as it exists,
// whatever the follow selector (and a healthy one would put an unhealthy
// task back in).
func TestService_R2g_a_look_alike_container_does_not_decide_a_followed_tasks_state(t *testing.T) {
	f := newFakeSwarm()
	prod := map[string]string{"env": "prod", catalog.LabelHost: "web.example.com"}
	web := task("web", 1, "n2", running, running) // on another node: no container of its own here
	f.update(func() {
		f.services["web"] = replicated("web", "web", 1, prod)
		f.tasks[web.ID] = web
		f.containers["look-alike"] = container.Summary{
			ID: "c-look-alike", State: "exited", Status: "Exited (0) 2 seconds ago",
			Labels: map[string]string{labelTaskID: web.ID, labelServiceID: "web"},
		}
	})
	sink := start(t, f, Config{Resync: time.Hour})
	v := sink.WaitFor(t, wait, "the first listing", func(v followtest.View) bool { return v.Replaces == 1 })
	if got := v.ByID[web.ID]; got.State != catalog.StateRunning {
		t.Errorf("the followed task is %v after a look-alike container's listing, want running as Swarm says: %+v", got.State, got)
	}
}
