package swarm

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// webOnTwoNodes sets up web (caddy.port 8080) with task 1 on node n2,
// task 2 on node n3 and task 3 on this node.
func webOnTwoNodes(f *fakeSwarm) {
	f.update(func() {
		f.services["web"] = replicated("web", "web", 3, map[string]string{catalog.LabelHost: "web.example.com", catalog.LabelPort: "8080"})
		for i, node := range []string{"n2", "n3", "local"} {
			tk := task("web", i+1, node, running, running)
			f.tasks[tk.ID] = tk
			if node == "local" {
				f.containers[tk.ID] = taskContainer(tk, "running", "Up 1 second")
			}
		}
	})
}

// R11t: a node whose tasks stop answering probes (a crash, a cut link)
// has its tasks taken out of the rotation within NodeProbe plus
// NodeProbeTimeout, long before Swarm would mark it down; the other
// nodes' tasks stay; once a probe is answered again, they are back. The
// followed node's own tasks are never probed.
func TestNodeWatchTakesALostNodesTasksOut(t *testing.T) {
	f := newFakeSwarm()
	webOnTwoNodes(f)
	sink := start(t, f, Config{Resync: time.Hour, NodeProbe: 20 * time.Millisecond})
	routable := func(in catalog.Instance) bool {
		return in.State == catalog.StateRunning && in.Health != catalog.HealthUnhealthy
	}
	waitCalls(t, f, "dial 10.0.1.11:8080", 1)
	waitCalls(t, f, "dial 10.0.1.12:8080", 1)
	for _, id := range []string{"web-t1", "web-t2", "web-t3"} {
		if v := view(t, sink); !routable(v.ByID[id]) {
			t.Fatalf("%s not routable before any loss: %+v", id, v.ByID[id])
		}
	}
	f.update(func() { f.silent["10.0.1.11:8080"] = true })
	lost := time.Now()
	sink.WaitFor(t, wait, "web-t1 (node n2) out", func(v followtest.View) bool { return !routable(v.ByID["web-t1"]) })
	if took := time.Since(lost); took > time.Second {
		t.Errorf("the lost node's task left after %v, want within 1s", took)
	}
	v := view(t, sink)
	if !routable(v.ByID["web-t2"]) || !routable(v.ByID["web-t3"]) {
		t.Errorf("the other nodes' tasks left too: %+v %+v", v.ByID["web-t2"], v.ByID["web-t3"])
	}
	f.update(func() { delete(f.silent, "10.0.1.11:8080") })
	sink.WaitFor(t, wait, "web-t1 back", func(v followtest.View) bool { return routable(v.ByID["web-t1"]) })
	if n := f.Calls("dial 10.0.1.13:8080"); n != 0 {
		t.Errorf("this node's own task was probed %d times", n)
	}
}

// A refused connection is an answer: the node is there, its task does
// not listen (yet); its tasks stay (readiness, R1a, is for that). And a
// task Swarm shuts down is no probe target any more.
func TestNodeWatchRefusedIsAnAnswer(t *testing.T) {
	f := newFakeSwarm()
	webOnTwoNodes(f)
	sink := start(t, f, Config{Resync: time.Hour, NodeProbe: 20 * time.Millisecond})
	waitCalls(t, f, "dial 10.0.1.11:8080", 5)
	if in := view(t, sink).ByID["web-t1"]; in.Health == catalog.HealthUnhealthy {
		t.Fatalf("a refusing node's task was taken out: %+v", in)
	}
	f.update(func() { f.tasks["web-t1"] = task("web", 1, "n2", running, swarm.TaskStateShutdown) })
	f.events <- serviceEvent("web", "update")
	sink.WaitFor(t, wait, "web-t1 gone", func(v followtest.View) bool { _, ok := v.ByID["web-t1"]; return !ok })
	// A round of probes that began before the task left may still dial
	// it once: wait until a round has begun and ended since (the other
	// node's task dialled twice more), then count; three more rounds
	// must not dial it again.
	other := f.Calls("dial 10.0.1.12:8080")
	waitCalls(t, f, "dial 10.0.1.12:8080", other+2)
	n := f.Calls("dial 10.0.1.11:8080")
	waitCalls(t, f, "dial 10.0.1.12:8080", other+5)
	if m := f.Calls("dial 10.0.1.11:8080"); m != n {
		t.Errorf("a task being shut down was still probed (%d more times)", m-n)
	}
}

// view returns what the sink holds now.
func view(t *testing.T, sink *followtest.Sink) followtest.View {
	t.Helper()
	return sink.WaitFor(t, wait, "a view", func(followtest.View) bool { return true })
}

// waitCalls waits until f has had call made n times.
func waitCalls(t *testing.T, f *fakeSwarm, call string, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for f.Calls(call) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d calls, want %d", call, f.Calls(call), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
