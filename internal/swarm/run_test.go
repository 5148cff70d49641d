package swarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/swarm"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

func dockerConfig(host string) docker.Config { return docker.Config{Host: host} }

const wait = 5 * time.Second

// start follows f with cfg and waits for the first listing.
func start(t *testing.T, f *fakeSwarm, cfg Config) *followtest.Sink {
	t.Helper()
	loop := f.adapter(cfg).Loop()
	sink, _ := followtest.Start(t, wait, func(ctx context.Context, log *zap.Logger, s catalog.Sink) { loop.Run(ctx, s, log) })
	sink.WaitFor(t, wait, "the first listing", func(v followtest.View) bool { return v.Replaces == 1 })
	return sink
}

func tasksOf(v followtest.View, svc string) map[string]catalog.Instance {
	out := map[string]catalog.Instance{}
	for id, in := range v.ByID {
		if id != svc && len(id) > len(svc) && id[:len(svc)] == svc {
			out[id] = in
		}
	}
	return out
}

// threeWeb sets up web, 3 replicas running on another node, and the
// unrelated service api.
func threeWeb(f *fakeSwarm) {
	f.update(func() {
		f.services["web"] = replicated("web", "web", 3, map[string]string{catalog.LabelHost: "web.example.com"})
		f.services["api"] = replicated("api", "api", 1, nil)
		for i := 1; i <= 3; i++ {
			t := task("web", i, "n2", running, running)
			f.tasks[t.ID] = t
		}
		t := task("api", 1, "n2", running, running)
		f.tasks[t.ID] = t
	})
}

// A service event re-lists that service's tasks only (ServiceInspect,
// TaskList, ContainerList: one each), never the cluster: a scale to 5
// adds two instances, a scale to 1 takes four out.
func TestServiceEventRelistsOneService(t *testing.T) {
	f := newFakeSwarm()
	threeWeb(f)
	sink := start(t, f, Config{Resync: time.Hour})
	if n := len(tasksOf(sink.Snapshot(), "web")); n != 3 {
		t.Fatalf("%d web tasks listed, want 3", n)
	}
	lists := f.Calls("TaskList")

	f.update(func() {
		f.services["web"] = replicated("web", "web", 5, f.services["web"].Spec.Labels)
		for i := 4; i <= 5; i++ {
			tk := task("web", i, "n2", running, running)
			f.tasks[tk.ID] = tk
		}
	})
	f.events <- serviceEvent("web", "update")
	sink.WaitFor(t, wait, "5 web tasks", func(v followtest.View) bool { return len(tasksOf(v, "web")) == 5 })

	f.update(func() {
		f.services["web"] = replicated("web", "web", 1, f.services["web"].Spec.Labels)
		for i := 2; i <= 5; i++ {
			tk := task("web", i, "n2", running, shutdown) // being shut down
			f.tasks[tk.ID] = tk
		}
	})
	f.events <- serviceEvent("web", "update")
	sink.WaitFor(t, wait, "1 web task", func(v followtest.View) bool { return len(tasksOf(v, "web")) == 1 })
	if _, ok := sink.Snapshot().ByID["api-t1"]; !ok {
		t.Error("api's task went missing")
	}
	if got := f.Calls("TaskList") - lists; got < 2 || got > 6 {
		// Two events, and the few re-listings of web while it converges.
		t.Errorf("%d TaskList calls for two service events, want 2 to 6", got)
	}
	if got := f.Calls("ServiceList"); got != 1 {
		t.Errorf("ServiceList called %d times, want once (the listing)", got)
	}

	f.update(func() { delete(f.services, "web") })
	f.events <- serviceEvent("web", "remove")
	sink.WaitFor(t, wait, "web gone", func(v followtest.View) bool {
		_, svc := v.ByID["web"]
		return !svc && len(tasksOf(v, "web")) == 0
	})
}

// A local task's container kill takes the task out at once (Stopping),
// before any re-listing; its health comes from the container.
func TestLocalContainerEvents(t *testing.T) {
	f := newFakeSwarm()
	tk := task("web", 1, "local", running, running)
	f.update(func() {
		f.services["web"] = replicated("web", "web", 1, nil)
		f.tasks[tk.ID] = tk
		f.containers[tk.ID] = taskContainer(tk, "running", "Up 2 seconds (healthy)")
	})
	sink := start(t, f, Config{Resync: time.Hour})
	if in := sink.Snapshot().ByID[tk.ID]; in.State != catalog.StateRunning || in.Health != catalog.HealthHealthy {
		t.Fatalf("listed %v/%v, want running/healthy", in.State, in.Health)
	}
	f.update(func() { f.containers[tk.ID] = taskContainer(tk, "running", "Up 9 seconds (unhealthy)") })
	f.events <- containerEvent(tk, "health_status: unhealthy")
	sink.WaitFor(t, wait, "unhealthy", func(v followtest.View) bool { return v.ByID[tk.ID].Health == catalog.HealthUnhealthy })

	f.events <- containerEvent(tk, "kill", "signal", "15")
	deadline := time.Now().Add(wait)
	for !sink.IsStopping(tk.ID) {
		if time.Now().After(deadline) {
			t.Fatal("the kill did not take the task out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A task on another node that fails sends no event: the re-listing of its
// settled service (every Resync) takes it out; a converging service is
// re-listed every Converging.
func TestReconciliationBound(t *testing.T) {
	f := newFakeSwarm()
	threeWeb(f)
	const resync = 300 * time.Millisecond
	sink := start(t, f, Config{Resync: resync, Converging: 50 * time.Millisecond})
	changed := time.Now()
	f.update(func() { f.tasks["web-t2"] = task("web", 2, "n2", failed, shutdown) })
	sink.WaitFor(t, wait, "web-t2 gone without an event", func(v followtest.View) bool {
		_, ok := v.ByID["web-t2"]
		return !ok
	})
	// The bound is Resync plus a tick; allow scheduling slack under -race.
	if took := time.Since(changed); took > resync+time.Second {
		t.Errorf("took %v, want within about %v", took, resync)
	}
	// Now converging (2 tasks for 3 replicas): the replacement, on
	// another node, is found within Converging.
	changed = time.Now()
	f.update(func() {
		tk := task("web", 4, "n3", running, running)
		f.tasks[tk.ID] = tk
	})
	sink.WaitFor(t, wait, "web-t4 found without an event", func(v followtest.View) bool {
		_, ok := v.ByID["web-t4"]
		return ok
	})
	if took := time.Since(changed); took > resync {
		t.Errorf("a converging service took %v, want less than Resync (%v)", took, resync)
	}
}

// A node event (a node down, drained) re-lists the services with a task
// on that node, and only them.
func TestNodeEventRelistsItsServices(t *testing.T) {
	f := newFakeSwarm()
	threeWeb(f)
	f.update(func() {
		f.services["other"] = replicated("other", "other", 1, nil)
		tk := task("other", 1, "n9", running, running)
		f.tasks[tk.ID] = tk
	})
	sink := start(t, f, Config{Resync: time.Hour})
	f.update(func() { f.tasks["web-t1"] = task("web", 1, "n2", swarm.TaskStateOrphaned, shutdown) })
	f.events <- events.Message{Type: events.NodeEventType, Action: "update", Actor: events.Actor{ID: "n2"}}
	sink.WaitFor(t, wait, "web-t1 gone", func(v followtest.View) bool { _, ok := v.ByID["web-t1"]; return !ok })
	if f.Calls("ServiceInspect api") == 0 {
		t.Error("api, with a task on n2, was not re-listed")
	}
	if n := f.Calls("ServiceInspect other"); n != 0 {
		t.Errorf("other, with no task on n2, was re-listed %d times", n)
	}
}

func TestSchedule(t *testing.T) {
	s := newSchedule()
	now := time.Now()
	s.set("a", now.Add(time.Second))
	s.set("b", now.Add(-time.Second))
	if got := s.take(now); len(got) != 1 || got[0] != "b" {
		t.Fatalf("take = %v, want [b]", got)
	}
	if got := s.take(now.Add(time.Hour)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("take = %v, want [a]: b is in progress until set again", got)
	}
	s.set("a", now.Add(time.Minute))
	s.set("a", now.Add(2*time.Minute)) // a later time does not postpone it
	if got := s.take(now.Add(90 * time.Second)); len(got) != 1 {
		t.Fatalf("take = %v, want [a]", got)
	}
	s.remove("a")
	if got := s.take(now.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("take = %v after remove", got)
	}
}

// TestStalenessBound measures, with the default intervals, how stale a
// route can be for a change Swarm sends no event for (a task on another
// node): a converging service's (a replacement task starting elsewhere)
// and a settled service's (a task failing elsewhere). It takes about 30 s,
// so it runs only without -short.
func TestStalenessBound(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the default reconciliation intervals (about 30 s): run without -short")
	}
	f := newFakeSwarm()
	threeWeb(f)
	sink := start(t, f, Config{})
	measure := func(change func(), cond func(followtest.View) bool) time.Duration {
		at := time.Now()
		f.update(change)
		sink.WaitFor(t, 2*DefaultResync, "the change", cond)
		return time.Since(at)
	}
	var settled, converging []time.Duration
	for i := range 3 {
		id := fmt.Sprintf("web-t%d", i+1)
		settled = append(settled, measure(
			func() { f.tasks[id] = task("web", i+1, "n2", failed, shutdown) },
			func(v followtest.View) bool { _, ok := v.ByID[id]; return !ok }))
		// Now 2 of 3: converging until the replacement runs.
		for j := range 3 {
			slot := 10*(i+1) + j
			tk := task("web", slot, "n3", starting, running)
			converging = append(converging, measure(
				func() { f.tasks[tk.ID] = tk },
				func(v followtest.View) bool { _, ok := v.ByID[tk.ID]; return ok }))
			if j < 2 {
				// Rejected there: still converging.
				f.update(func() { f.tasks[tk.ID] = task("web", slot, "n3", swarm.TaskStateRejected, shutdown) })
			} else {
				// Running: the re-listing that sees it finds the service
				// settled, and re-lists it next after Resync.
				f.update(func() { f.tasks[tk.ID] = task("web", slot, "n3", running, running) })
				sink.WaitFor(t, wait, "the replacement running", func(v followtest.View) bool {
					return v.ByID[tk.ID].State == catalog.StateRunning
				})
			}
		}
	}
	t.Logf("settled service, task failing on another node: %v (bound: Resync %v + a tick)", settled, DefaultResync)
	t.Logf("converging service, task appearing on another node: %v (bound: Converging %v + a tick)", converging, DefaultConverging)
	for _, d := range settled {
		if d > DefaultResync+time.Second {
			t.Errorf("a settled service was %v stale, more than Resync %v", d, DefaultResync)
		}
	}
	for _, d := range converging {
		if d > DefaultConverging+time.Second {
			t.Errorf("a converging service was %v stale, more than Converging %v", d, DefaultConverging)
		}
	}
}

// R9a: a manager's version names the API version the Engine serves, from
// its /version (Docker 29: 1.55), not the older one the client negotiated
// (1.51), once per session.
func TestSwarmVersion_R9a_names_the_Engines_API(t *testing.T) {
	f := newFakeSwarm()
	threeWeb(f)
	c := &conn{eng: f, log: zap.NewNop(), endpoint: EndpointTasks, resync: time.Hour,
		services: map[string]*service{}, members: map[string]map[string]struct{}{},
		taskService: map[string]string{}, taskNode: map[string]string{}, due: newSchedule(), index: newScaleIndex()}
	for range 2 {
		l, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Version.String(); got != "Docker Engine 29.0.0-beta.18 (API 1.55)" {
			t.Errorf("version %q, want the Engine's own API version", got)
		}
	}
	if n := f.Calls("ServerVersion"); n != 1 {
		t.Errorf("%d /version calls for two listings, want 1 a session", n)
	}
}
