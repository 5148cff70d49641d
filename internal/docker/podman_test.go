package docker

// Podman's differences (R11p), against payloads recorded from Podman 4.3.1's
// Docker-compatible API on this machine (testdata/podman) and, where a
// newer Podman differs, payloads written after its issues: podman#24003 (a
// health_status event at every check), podman#27786 (no Health in
// /containers/json), older died events without labels.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/go-connections/nat"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// podmanVersion is the version answer of Podman 4.3.1 (its components).
var podmanVersion = types.Version{
	Version: "4.3.1", APIVersion: "1.41",
	Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}},
}

func readPodmanEvents(t *testing.T) []events.Message {
	t.Helper()
	f, err := os.Open("testdata/podman/events-4.3.1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []events.Message
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m events.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestPodman_event_filters_ask_for_died_and_remove_and_no_scope(t *testing.T) {
	f := eventFilters()
	if f.Contains("scope") {
		t.Errorf("the event filters have a scope key, which Podman does not take: %v", f)
	}
	for _, want := range []string{"die", "died", "destroy", "remove", "health_status", "start"} {
		if !f.ExactMatch("event", want) {
			t.Errorf("the event filters do not ask for %q: %v", want, f.Get("event"))
		}
	}
}

func TestPodman_recorded_events_translate(t *testing.T) {
	type got struct {
		action                      string
		ok, stopping, started, gone bool
	}
	var seen []got
	for _, m := range readPodmanEvents(t) {
		ev, ok := ContainerEvent(m)
		if ok && ev.ID != m.Actor.ID {
			t.Errorf("%s: ID %q, want the actor's %q", m.Action, ev.ID, m.Actor.ID)
		}
		seen = append(seen, got{string(m.Action), ok, ev.Stopping, ev.Started, ev.Deleted})
	}
	want := []got{
		{"create", true, false, false, false},
		{"init", false, false, false, false},
		{"start", true, false, true, false},
		{"pause", true, false, false, false},
		{"unpause", true, false, false, false},
		{"die", true, true, false, false}, // podman stop: no kill, no stop event
		{"cleanup", false, false, false, false},
		{"cleanup", false, false, false, false},
		{"init", false, false, false, false},
		{"start", true, false, true, false},
		{"kill", false, false, false, false}, // no signal attribute: the die follows
		{"die", true, true, false, false},
		{"cleanup", false, false, false, false},
		{"remove", true, false, false, true}, // not "destroy"
	}
	if !slices.Equal(seen, want) {
		t.Errorf("recorded Podman events translate as\n%v\nwant\n%v", seen, want)
	}
}

func TestPodman_died_and_bare_health_status_events(t *testing.T) {
	const id = "74d3b78c22a17426ab48a840580cc7be1fbfc454b467dc829ea79733e34f1a7c"
	for _, tc := range []struct {
		name     string
		raw      string
		stopping bool
		why      string
	}{
		{
			// An older Podman's died event: no labels, no exit code.
			name: "died without labels", stopping: true, why: "exited",
			raw: `{"status":"died","id":"` + id + `","Type":"container","Action":"died","Actor":{"ID":"` + id + `","Attributes":{"image":"x","name":"app"}},"time":1}`,
		},
		{
			name: "died with containerExitCode only", stopping: true, why: "exited with code 143 (killed by SIGTERM)",
			raw: `{"status":"died","Type":"container","Action":"died","Actor":{"ID":"` + id + `","Attributes":{"containerExitCode":"143"}},"time":1}`,
		},
		{
			// podman#24003: the verdict in an attribute, a bare action.
			name: "bare health_status",
			raw:  `{"status":"health_status","Type":"container","Action":"health_status","Actor":{"ID":"` + id + `","Attributes":{"health_status":"healthy","name":"app"}},"time":1}`,
		},
		{
			name: "Docker's health_status",
			raw:  `{"status":"health_status: healthy","Type":"container","Action":"health_status: healthy","Actor":{"ID":"` + id + `","Attributes":{"name":"app"}},"time":1}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m events.Message
			if err := json.Unmarshal([]byte(tc.raw), &m); err != nil {
				t.Fatal(err)
			}
			ev, ok := ContainerEvent(m)
			if !ok || ev.ID != id {
				t.Fatalf("ContainerEvent = %+v, %v; want an event about %s", ev, ok, id)
			}
			if ev.Stopping != tc.stopping || ev.Why != tc.why {
				t.Errorf("Stopping %v (%q), want %v (%q)", ev.Stopping, ev.Why, tc.stopping, tc.why)
			}
		})
	}
}

// fakePodman is an engine answering as Podman does: recorded listing,
// inspections from a function, events from a channel.
type fakePodman struct {
	version    types.Version
	versionErr error
	list       []container.Summary
	inspect    func(id string) container.InspectResponse
	events     chan events.Message
	rootless   bool
	inspectErr atomic.Value // error: what ContainerInspect answers instead, when set
	// listHealth is the health a listing at API 1.52 gives beside each
	// container (Docker 29), by ID.
	listHealth  map[string]*ListedHealth
	lists       atomic.Int64
	healthLists atomic.Int64
	inspects    atomic.Int64
	mu          sync.Mutex
	filters     []string
}

func (f *fakePodman) Events(ctx context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
	f.mu.Lock()
	f.filters = append(f.filters, o.Filters.Keys()...)
	f.mu.Unlock()
	errs := make(chan error, 1)
	msgs := make(chan events.Message)
	go func() {
		for {
			select {
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			case m := <-f.events:
				select {
				case msgs <- m:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
		}
	}()
	return msgs, errs
}

func (f *fakePodman) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	f.lists.Add(1)
	return slices.Clone(f.list), nil
}

func (f *fakePodman) ContainerListHealth(context.Context, container.ListOptions) ([]Listed, error) {
	f.healthLists.Add(1)
	out := listed(slices.Clone(f.list))
	for i := range out {
		out[i].Health = f.listHealth[out[i].ID]
	}
	return out, nil
}

func (f *fakePodman) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	f.inspects.Add(1)
	if err, _ := f.inspectErr.Load().(error); err != nil {
		return container.InspectResponse{}, err
	}
	return f.inspect(id), nil
}

func (f *fakePodman) ServerVersion(context.Context) (types.Version, error) {
	return f.version, f.versionErr
}
func (f *fakePodman) Rootless(context.Context) (bool, error) { return f.rootless, nil }
func (f *fakePodman) ClientVersion() string                  { return "1.41" }
func (f *fakePodman) Close() error                           { return nil }

func readPodmanList(t *testing.T) []container.Summary {
	t.Helper()
	data, err := os.ReadFile("testdata/podman/containers-4.3.1.json")
	if err != nil {
		t.Fatal(err)
	}
	var list []container.Summary
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// inspectWithHealth is the recorded container, running, with a health
// check in the given status.
func inspectWithHealth(s container.Summary, status container.HealthStatus) container.InspectResponse {
	h := &container.Health{Status: status}
	if status == container.Unhealthy {
		h.FailingStreak = defaultRetries // a verdict, not a resumed container's mark (R1c)
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: s.ID, Name: s.Names[0], Image: s.ImageID,
			State: &container.State{Status: "running", Running: true, Health: h},
		},
		Config: &container.Config{Labels: s.Labels, Healthcheck: &container.HealthConfig{Test: []string{"CMD", "/hello", "-healthcheck"}}},
		NetworkSettings: &container.NetworkSettings{
			NetworkSettingsBase: container.NetworkSettingsBase{Ports: nat.PortMap{"8080/tcp": {{HostIP: "127.0.0.1", HostPort: "42717"}}}},
			Networks:            s.NetworkSettings.Networks,
		},
	}
}

func runFake(t *testing.T, f *fakePodman) *followtest.Sink {
	t.Helper()
	a, err := New(Config{Host: "unix:///nonexistent/podman.sock", Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	a.wrap = func(engine) engine { return f }
	sink, _ := followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
	return sink
}

// Podman 4.3.1 lists a running container whose check has not passed yet
// as "Up 1 second", without "(health: starting)": taken at its word it has
// no check and would be routed. On Podman it is inspected; on the Engine
// (whose Status always carries the verdict) it is not.
func TestPodman_listing_without_health_is_inspected(t *testing.T) {
	list := readPodmanList(t)
	for _, tc := range []struct {
		name       string
		version    types.Version
		versionErr error
		health     catalog.Health
		inspects   int64
	}{
		{"Podman", podmanVersion, nil, catalog.HealthStarting, 1},
		{"Docker Engine", types.Version{Version: "20.10.24", Components: []types.ComponentVersion{{Name: "Engine"}}}, nil, catalog.HealthNone, 0},
		// No version answer (Podman's can be slow): read as Podman's.
		{"no version answer", types.Version{}, context.DeadlineExceeded, catalog.HealthStarting, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePodman{version: tc.version, versionErr: tc.versionErr, list: list, events: make(chan events.Message),
				inspect: func(string) container.InspectResponse { return inspectWithHealth(list[0], container.Starting) }}
			sink := runFake(t, f)
			v := sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool { _, ok := v.Named("cdp-h"); return ok })
			in, _ := v.Named("cdp-h")
			if in.Health != tc.health {
				t.Errorf("health %v, want %v", in.Health, tc.health)
			}
			if n := f.inspects.Load(); n != tc.inspects {
				t.Errorf("%d inspections, want %d", n, tc.inspects)
			}
			if len(in.Networks) != 1 || in.Networks[0].Address != "10.88.0.2" || len(in.Ports) != 1 || in.Ports[0].HostPort != 42717 {
				t.Errorf("networks %+v ports %+v: want podman 10.88.0.2 and 127.0.0.1:42717", in.Networks, in.Ports)
			}
		})
	}
}

// R11r: a rootless daemon says so in /info: Podman in its own field
// "Rootless", the rootless Engine in its security options. Its containers'
// addresses are inside the user's network namespace: dropped, so only the
// published port is routed to, from the listing and from an inspection
// alike. A rootful daemon's addresses stay.
func TestPodman_rootless_daemon_addresses_are_dropped(t *testing.T) {
	list := readPodmanList(t)
	for _, tc := range []struct {
		name     string
		rootless bool
		address  string
	}{
		{"rootless", true, ""},
		{"rootful", false, "10.88.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePodman{version: podmanVersion, list: list, events: make(chan events.Message), rootless: tc.rootless,
				inspect: func(string) container.InspectResponse { return inspectWithHealth(list[0], container.Healthy) }}
			sink := runFake(t, f)
			v := sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool { _, ok := v.Named("cdp-h"); return ok })
			in, _ := v.Named("cdp-h")
			if len(in.Networks) != 1 || in.Networks[0].Address != tc.address || in.Networks[0].Network != "podman" {
				t.Errorf("networks %+v: want podman with address %q", in.Networks, tc.address)
			}
			if len(in.Ports) != 1 || in.Ports[0].HostPort != 42717 {
				t.Errorf("ports %+v: want the published 42717", in.Ports)
			}
		})
	}
}

// The /info answers that say rootless, as Podman 4.3.1 and the rootless
// Engine give them, and those that do not.
func TestPodman_info_tells_rootless(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"Podman 4.3.1 rootless", `{"Rootless":true,"SecurityOptions":["name=seccomp,profile=default"]}`, true},
		{"Podman 4.3.1 rootful", `{"Rootless":false,"SecurityOptions":["name=seccomp,profile=default"]}`, false},
		{"rootless Docker Engine", `{"SecurityOptions":["name=seccomp,profile=builtin","name=rootless","name=cgroupns"]}`, true},
		{"Docker Engine", `{"SecurityOptions":["name=apparmor","name=seccomp,profile=builtin","name=cgroupns"]}`, false},
		{"a look-alike", `{"SecurityOptions":["name=rootlessish"]}`, false},
	} {
		got, err := readRootless([]byte(tc.body))
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := readRootless([]byte("<html>")); err == nil {
		t.Error("a body that is not JSON read without an error")
	}
}

// podman#24003: newer Podmans send a health_status event at every check,
// changed or not. 1,000 checks that change nothing: 1,000 inspections, no
// catalog write (the sink's Put counter stays flat); then a check that
// changes the verdict: one write.
func TestPodman_health_status_at_every_check_costs_no_catalog_write(t *testing.T) {
	list := readPodmanList(t)
	list[0].Status = "Up 1 second (healthy)"
	var status atomic.Value
	status.Store(container.Healthy)
	f := &fakePodman{version: podmanVersion, list: list, events: make(chan events.Message),
		inspect: func(string) container.InspectResponse {
			return inspectWithHealth(list[0], status.Load().(container.HealthStatus))
		}}
	sink := runFake(t, f)
	sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool {
		in, ok := v.Named("cdp-h")
		return ok && in.Health == catalog.HealthHealthy
	})
	check := func(verdict string) events.Message {
		return events.Message{Type: events.ContainerEventType, Action: events.ActionHealthStatus,
			Actor: events.Actor{ID: list[0].ID, Attributes: map[string]string{"health_status": verdict, "name": "cdp-h"}}}
	}
	before, inspects := sink.Puts(), f.inspects.Load()
	const checks = 1000
	start := time.Now()
	for i := range checks {
		f.events <- check("healthy")
		// Each check is applied on its own (no coalescing), as when
		// checks are an interval apart.
		waitUntil(t, eventTimeout, "check applied", func() bool { return f.inspects.Load() >= inspects+int64(i)+1 })
	}
	if d := sink.Puts() - before; d != 0 {
		t.Errorf("%d checks that changed nothing made %d catalog writes, want 0", checks, d)
	}
	t.Logf("%d unchanged health_status events: %d inspections, %d catalog writes, %v", checks, f.inspects.Load()-inspects, sink.Puts()-before, time.Since(start))

	status.Store(container.Unhealthy)
	f.events <- check("unhealthy")
	sink.WaitFor(t, eventTimeout, "the unhealthy verdict", func(v followtest.View) bool {
		in, _ := v.Named("cdp-h")
		return in.Health == catalog.HealthUnhealthy
	})
	if d := sink.Puts() - before; d != 1 {
		t.Errorf("a check that changed the verdict made %d catalog writes, want 1", d)
	}
	if got := strings.Join(f.filters, ","); strings.Contains(got, "scope") {
		t.Errorf("the subscription asked for a scope filter: %s", got)
	}
}

// Podman inspects a container without a check (HEALTHCHECK NONE, or
// --no-healthcheck) with an empty health record: no check, routable.
func TestPodman_empty_health_record_is_no_check(t *testing.T) {
	st := &container.State{Status: "running", Running: true, Health: &container.Health{}}
	for _, cfg := range []*container.Config{nil, {}, {Healthcheck: &container.HealthConfig{Test: []string{"NONE"}}}} {
		if h := inspectHealth(st, cfg); h != catalog.HealthNone {
			t.Errorf("config %+v: health %v, want none", cfg, h)
		}
	}
	cfg := &container.Config{Healthcheck: &container.HealthConfig{Test: []string{"CMD", "/hello", "-healthcheck"}}}
	if h := inspectHealth(st, cfg); h != catalog.HealthStarting {
		t.Errorf("a configured check with an empty record: %v, want starting", h)
	}
}

// Podman answers an inspection of a container being removed with a 500
// "... does not exist in database: no such container" rather than a 404.
// It is read as not found: the listing goes on without that container,
// and an event's inspection takes it out; the session goes on. (Taken as
// an error, it ended the session at each listing, and routes waited
// seconds: TestDocker_R6 on Podman missed its 5 s.)
func TestPodman_inspect_of_a_removed_container_is_not_found(t *testing.T) {
	list := readPodmanList(t)
	gone := list[0]
	gone.ID, gone.Names = strings.Repeat("e", 64), []string{"/cdp-gone"}
	running := list[0]
	running.Status = "Up 1 second (healthy)"
	// The gone container's listing tells no health (Podman's "Up 1
	// second"): it is inspected, and the answer is Podman's 500.
	f := &fakePodman{version: podmanVersion, list: []container.Summary{gone, running}, events: make(chan events.Message)}
	f.inspect = func(id string) container.InspectResponse { return inspectWithHealth(running, container.Healthy) }
	f.inspectErr.Store(errors.New("Error response from daemon: container " + gone.ID +
		" does not exist in database: no such container"))
	sink := runFake(t, f)
	v := sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool { _, ok := v.Named("cdp-h"); return ok })
	if _, ok := v.Named("cdp-gone"); ok {
		t.Error("the container removed before its inspection is in the catalog")
	}
	// An event whose inspection gets the same answer takes it out.
	f.events <- events.Message{Type: events.ContainerEventType, Action: events.ActionDie,
		Actor: events.Actor{ID: running.ID, Attributes: map[string]string{"name": "cdp-h"}}}
	sink.WaitFor(t, eventTimeout, "the container gone", func(v followtest.View) bool { _, ok := v.Named("cdp-h"); return !ok })
	if n := f.lists.Load(); n != 1 {
		t.Errorf("%d listings, want 1: the inspection's answer ended the session", n)
	}
	if !podmanGone(f.inspectErr.Load().(error)) || podmanGone(errors.New("connection refused")) || podmanGone(nil) {
		t.Error("podmanGone reads errors wrongly")
	}
}
