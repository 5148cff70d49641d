package swarm

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

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

// R2g: nor do a look-alike's events: its destroy does not drop the task
// it names, its kill does not take it out of its rotations. Only the
// events of the container Swarm names for a task are the task's.
func TestService_R2g_a_look_alike_containers_events_leave_a_followed_task_alone(t *testing.T) {
	f := newFakeSwarm()
	web, api := task("web", 1, "local", running, running), task("api", 1, "local", running, running)
	f.update(func() {
		f.services["web"] = replicated("web", "web", 1, map[string]string{catalog.LabelHost: "web.example.com"})
		f.services["api"] = replicated("api", "api", 1, nil)
		f.tasks[web.ID], f.tasks[api.ID] = web, api
		f.containers[web.ID] = taskContainer(web, "running", "Up 2 seconds (healthy)")
		f.containers[api.ID] = taskContainer(api, "running", "Up 2 seconds (healthy)")
	})
	sink := start(t, f, Config{Resync: time.Hour})
	lookAlike := func(action string, attrs ...string) events.Message {
		m := containerEvent(web, action, attrs...)
		m.Actor.ID = "c-look-alike"
		return m
	}
	f.events <- lookAlike("kill", "signal", "15")
	f.events <- lookAlike("destroy")
	// Two marks, one after the other: once the second is in, the batch
	// holding the look-alike's events has been applied.
	f.update(func() { f.containers[api.ID] = taskContainer(api, "running", "Up 9 seconds (unhealthy)") })
	f.events <- containerEvent(api, "health_status: unhealthy")
	sink.WaitFor(t, wait, "api unhealthy", func(v followtest.View) bool { return v.ByID[api.ID].Health == catalog.HealthUnhealthy })
	f.update(func() { f.containers[api.ID] = taskContainer(api, "running", "Up 9 seconds (healthy)") })
	f.events <- containerEvent(api, "health_status: healthy")
	v := sink.WaitFor(t, wait, "api healthy", func(v followtest.View) bool { return v.ByID[api.ID].Health == catalog.HealthHealthy })
	if in, ok := v.ByID[web.ID]; !ok || in.State != catalog.StateRunning {
		t.Errorf("a look-alike container's destroy took the task it names out of the catalog: %+v (present %v)", in, ok)
	}
	if sink.IsStopping(web.ID) {
		t.Error("a look-alike container's kill took the task it names out of its rotations")
	}
}
