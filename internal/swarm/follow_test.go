package swarm

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// R2g: a Swarm connection with a follow selector sees only the services
// whose own labels (deploy.labels) match it: another is not in the
// catalog, its tasks' container events cost no call, and a service whose
// labels change at an update joins or leaves.
func TestService_R2g_follow_selector(t *testing.T) {
	f := newFakeSwarm()
	prod := map[string]string{"env": "prod", catalog.LabelHost: "web.example.com"}
	staging := map[string]string{"env": "staging", catalog.LabelHost: "api.example.com"}
	web, api := task("web", 1, "local", running, running), task("api", 1, "local", running, running)
	f.update(func() {
		f.services["web"] = replicated("web", "web", 1, prod)
		f.services["api"] = replicated("api", "api", 1, staging)
		f.tasks[web.ID], f.tasks[api.ID] = web, api
		f.containers[web.ID] = taskContainer(web, "running", "Up 2 seconds")
		f.containers[api.ID] = taskContainer(api, "running", "Up 2 seconds")
	})
	a, err := New(Config{Resync: time.Hour, Docker: docker.Config{Host: "unix:///nonexistent/docker.sock", Resync: -1,
		Follow: selector.MustParse("env=prod")}})
	if err != nil {
		t.Fatal(err)
	}
	a.wrap = func(engine) engine { return f }
	a.dial = f.dial
	loop := a.Loop()
	sink, _ := followtest.Start(t, wait, func(ctx context.Context, log *zap.Logger, s catalog.Sink) { loop.Run(ctx, s, log) })
	v := sink.WaitFor(t, wait, "the first listing", func(v followtest.View) bool { return v.Replaces == 1 })
	if _, ok := v.ByID[web.ID]; !ok {
		t.Errorf("the followed service's task is not in the catalog: %v", v)
	}
	if _, ok := v.ByID[api.ID]; ok {
		t.Errorf("the task of a service not followed is in the catalog: %v", v)
	}
	if _, ok := v.ByID["api"]; ok {
		t.Errorf("a service not followed is in the catalog: %v", v)
	}

	// Its tasks' container events: dropped, no call. A followed task's
	// event after them is the mark that they were read.
	before := f.Calls("TaskInspect")
	for range 5 {
		f.events <- containerEvent(api, "health_status: unhealthy")
	}
	f.update(func() { f.containers[web.ID] = taskContainer(web, "running", "Up 9 seconds (unhealthy)") })
	f.events <- containerEvent(web, "health_status: unhealthy")
	sink.WaitFor(t, wait, "the followed task unhealthy", func(v followtest.View) bool { return v.ByID[web.ID].Health == catalog.HealthUnhealthy })
	if got := f.Calls("TaskInspect") - before; got != 1 {
		t.Errorf("%d TaskInspect calls for one followed task's event and five of one not followed, want 1", got)
	}

	// Labels changed at an update: api joins, web leaves.
	f.update(func() {
		f.services["api"] = replicated("api", "api", 1, prod)
		f.services["web"] = replicated("web", "web", 1, staging)
	})
	f.events <- serviceEvent("api", "update")
	f.events <- serviceEvent("web", "update")
	sink.WaitFor(t, wait, "api in, web out", func(v followtest.View) bool {
		_, apiIn := v.ByID[api.ID]
		_, webIn := v.ByID[web.ID]
		return apiIn && !webIn
	})
}
