package swarm

import (
	"fmt"
	"testing"

	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// benchSwarm is a service "web" of n running tasks, all claiming
// web.example.com (the Swarm case: every task of a service serves its
// hosts), in a real catalog that routes a selector view, with the
// translated instances by ID as the session knows them.
func benchSwarm(b *testing.B, n int) (*service, []swarm.Task, *catalog.Catalog, map[string]catalog.Instance) {
	b.Helper()
	s := replicated("web", "web", uint64(n), map[string]string{catalog.LabelHost: "web.example.com", catalog.LabelPort: "8080", "app": "web"})
	svc := fromService(s)
	tasks := make([]swarm.Task, n)
	for i := range n {
		tasks[i] = task("web", i+1, "n2", running, running)
		tasks[i].ID = fmt.Sprintf("task-%05d", i)
		tasks[i].NetworksAttachments[1].Addresses = []string{fmt.Sprintf("10.0.%d.%d/16", i/250, i%250+2)}
	}
	c := catalog.New(catalog.Options{})
	sel, err := selector.Parse("app=web")
	if err != nil {
		b.Fatal(err)
	}
	c.Watch(sel)
	insts, _ := translateService(svc, tasks, nil, EndpointTasks)
	c.Replace(insts)
	known := map[string]catalog.Instance{}
	for _, in := range insts {
		known[in.ID] = in
	}
	return svc, tasks, c, known
}

// BenchmarkTaskEvent is the adapter's work per task container event once
// the task is back from the Engine: translate it and Put it into a catalog
// holding n tasks of its service. The task flips between healthy and
// unhealthy, so every Put changes what is routable.
func BenchmarkTaskEvent(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			svc, tasks, c, _ := benchSwarm(b, n)
			health := [2]local{{catalog.StateRunning, catalog.HealthUnhealthy}, {catalog.StateRunning, catalog.HealthHealthy}}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				in, _ := fromTask(svc, tasks[7], &health[i&1])
				c.Put(in)
				i++
			}
		})
	}
}

// BenchmarkServiceEvent is the work per service event (or reconciliation)
// once the service's tasks are back from the Engine: translate all n,
// compare each with what the session knows, and Put the one that changed
// (it flips between running and shutting down: in and out of the
// rotation).
func BenchmarkServiceEvent(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			svc, tasks, c, known := benchSwarm(b, n)
			desired := [2]swarm.TaskState{swarm.TaskStateShutdown, swarm.TaskStateRunning}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				tasks[7].DesiredState = desired[i&1]
				insts, _ := translateService(svc, tasks, nil, EndpointTasks)
				for _, in := range insts {
					if old, ok := known[in.ID]; ok && follow.Same(old, in) {
						continue
					}
					known[in.ID] = in
					c.Put(in)
				}
				if len(insts) < n { // tasks[7] is being shut down: gone
					delete(known, tasks[7].ID)
					c.Delete(tasks[7].ID)
				}
				i++
			}
		})
	}
}
