package docker

import (
	"context"
	"sync"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// R2g: a connection with a follow selector sees only the containers
// whose own labels match it. One that does not is not in the listing's
// catalog, is not inspected for it, and once one created later has been
// inspected, its further events cost nothing: not one inspection more.
func TestFollow_R2g_unmatched_containers_are_not_seen(t *testing.T) {
	base := readPodmanList(t)[0]
	summary := func(id, run string) container.Summary {
		s := base
		s.ID, s.Names = id, []string{"/" + id}
		s.Status = "Up 1 second (unhealthy)" // inspected if followed: only the inspection tells a verdict (R1c)
		s.Labels = map[string]string{"cdt.run": run, catalog.LabelHost: id + ".example.com"}
		return s
	}
	list := []container.Summary{summary("in", "abc"), summary("out", "other"), {ID: "bare", Names: []string{"/bare"}, State: "running", Status: "Up 1 second (unhealthy)"}}
	later := map[string]container.Summary{"new-in": summary("new-in", "abc"), "new-in2": summary("new-in2", "abc"), "new-out": summary("new-out", "other")}
	var mu sync.Mutex
	inspects := map[string]int{}
	f := &fakePodman{
		version: types.Version{Version: "28.5.2", APIVersion: "1.41", Components: []types.ComponentVersion{{Name: "Engine"}}},
		list:    list, events: make(chan events.Message),
		inspect: func(id string) container.InspectResponse {
			mu.Lock()
			inspects[id]++
			mu.Unlock()
			s, ok := later[id]
			for _, l := range list {
				if l.ID == id {
					s, ok = l, true
				}
			}
			if !ok {
				t.Errorf("inspected %q, which does not exist", id)
			}
			return inspectWithHealth(s, container.Healthy)
		}}
	count := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return inspects[id]
	}
	a, err := New(Config{Host: "unix:///nonexistent/docker.sock", Resync: -1, Follow: selector.MustParse("cdt.run=abc")})
	if err != nil {
		t.Fatal(err)
	}
	a.wrap = func(engine) engine { return f }
	sink, _ := followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
	v := sink.WaitFor(t, waitTimeout, "the listing", func(v followtest.View) bool { return v.Replaces >= 1 })
	if _, ok := v.Named("in"); !ok {
		t.Errorf("the matching container is not in the catalog: %v", v)
	}
	for _, name := range []string{"out", "bare"} {
		if _, ok := v.Named(name); ok {
			t.Errorf("%s, which does not match the follow selector, is in the catalog: %v", name, v)
		}
		if n := count(name); n != 0 {
			t.Errorf("%s was inspected %d times for the listing, want 0", name, n)
		}
	}

	event := func(id string, action events.Action) {
		f.events <- events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: id}}
	}
	// Events of a listed container that is not followed: dropped.
	event("out", events.ActionStart)
	event("out", events.ActionHealthStatus+": healthy")
	// One created later: inspected once, at its first event. A matching one
	// created after it is a mark: once it is in the catalog, the session
	// has decided on new-out (one goroutine applies events in order).
	event("new-out", events.ActionCreate)
	event("new-in", events.ActionStart)
	sink.WaitFor(t, eventTimeout, "the matching container created later", func(v followtest.View) bool { _, ok := v.Named("new-in"); return ok })
	for range 5 {
		event("new-out", events.ActionStart)
		event("out", events.ActionKill) // a kill without a stop signal is ignored anyway
		event("out", events.ActionDie)
	}
	// Another mark: its event comes after all of the above, so they have
	// been dropped or inspected by the time it is in.
	event("new-in2", events.ActionStart)
	v = sink.WaitFor(t, eventTimeout, "the second matching container created later", func(v followtest.View) bool { _, ok := v.Named("new-in2"); return ok })
	for _, name := range []string{"out", "new-out"} {
		if _, ok := v.Named(name); ok {
			t.Errorf("%s, which does not match the follow selector, is in the catalog: %v", name, v)
		}
	}
	if n := count("new-out"); n != 1 {
		t.Errorf("the container not followed was inspected %d times for its 6 events, want once", n)
	}
	if n := count("out"); n != 0 {
		t.Errorf("the listed container not followed was inspected %d times for its events, want 0", n)
	}
	// Its destroy forgets it: the set of those not followed stays bounded.
	event("new-out", events.ActionDestroy)
	event("new-in", events.ActionHealthStatus+": healthy")
	waitUntil(t, eventTimeout, "new-in's second inspection", func() bool { return count("new-in") >= 2 })
}

// R2g: without a follow selector, every container is seen (the default
// when CADDY_DICER_FOLLOW is unset), as before.
func TestFollow_R2g_no_selector_follows_every_container(t *testing.T) {
	base := readPodmanList(t)[0]
	base.Labels = map[string]string{"cdt.run": "other"}
	f := &fakePodman{version: types.Version{Version: "28.5.2", APIVersion: "1.41", Components: []types.ComponentVersion{{Name: "Engine"}}},
		list: []container.Summary{base}, events: make(chan events.Message)}
	sink := runFake(t, f)
	sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool { return len(v.ByID) == 1 })
}

// R2g: the follow selector is part of the connection's key (two modules
// following different containers share no catalog), not of the Engine's
// (their containers' scale-to-zero state is the Engine's, R5f).
func TestNew_R2g_follow_in_the_key_not_the_engines(t *testing.T) {
	keys := func(cfg Config) (string, string) {
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a.Key(), a.EngineKey()
	}
	all, allEngine := keys(Config{Host: DefaultHost})
	prod, prodEngine := keys(Config{Host: DefaultHost, Follow: selector.MustParse("env=prod")})
	staging, stagingEngine := keys(Config{Host: DefaultHost, Follow: selector.MustParse("env=staging")})
	prod2, _ := keys(Config{Host: DefaultHost, Follow: selector.MustParse("env == prod")})
	labelled, _ := keys(Config{Host: DefaultHost, Labels: foreignlabels.SetTraefik, Follow: selector.MustParse("env=prod")})
	if all == prod || prod == staging || prod == labelled {
		t.Error("different follow selectors, one key")
	}
	if prod != prod2 {
		t.Error("one selector spelt two ways, two keys")
	}
	if allEngine != prodEngine || prodEngine != stagingEngine {
		t.Error("the follow selector changed the Engine's key")
	}
}
