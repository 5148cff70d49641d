package docker

// Tests against the machine's real Docker Engine. Every container and
// network they create carries the run label and is removed at the end of
// its test and, at the latest, by TestMain. They poll conditions with
// deadlines; nothing sleeps and hopes. Each test's containers carry a case
// label too, so tests can run in parallel with each other (and with other
// packages' tests on the same Engine): a test looks only at its own
// containers in the sink.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

const (
	// waitTimeout bounds a wait for the listing or a reconnection.
	waitTimeout = 15 * time.Second
	// eventTimeout bounds the wait for one Engine event to reach the sink:
	// it turns a lost event into a failure instead of a hang, and is no
	// latency check (those count calls or measure our pace). An Engine
	// shared with other packages' tests starting dozens of containers, on
	// a loaded machine, took over 5 s to deliver one.
	eventTimeout = 15 * time.Second
	// caseLabel tells one test's containers from the others'.
	caseLabel = "caddy-dicer.test.case"
)

// view is the recording sink's state as a condition sees it.
type view = followtest.View

// ---- harness -----------------------------------------------------------------

// counter counts the Engine calls of every session of one Run, and the
// events its streams reported, by the container they name.
type counter struct {
	mu       sync.Mutex
	inspects map[string]int
	events   map[string]int
	lists    int
	// rewrite, if set, changes each listing before the adapter sees it.
	rewrite func([]Listed)
}

func newCounter() *counter { return &counter{inspects: map[string]int{}, events: map[string]int{}} }

func (c *counter) wrap(e engine) engine { return &countingEngine{engine: e, c: c} }

func (c *counter) inspectsOf(ids ...string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, id := range ids {
		if n := c.inspects[id]; n > 0 {
			out[id] = n
		}
	}
	return out
}

type countingEngine struct {
	engine
	c *counter
}

// Events relays the Engine's stream, and counts each event by the
// container it names as the adapter reads it (ContainerEvent).
func (e *countingEngine) Events(ctx context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs, errs := e.engine.Events(ctx, o)
	out, outErr := make(chan events.Message), make(chan error, 1)
	go func() {
		for {
			select {
			case m := <-msgs:
				if ev, ok := ContainerEvent(m); ok && ev.ID != "" {
					e.c.mu.Lock()
					e.c.events[ev.ID]++
					e.c.mu.Unlock()
				}
				select {
				case out <- m:
				case <-ctx.Done():
					// The adapter's stream ends on an error, as the
					// client's does when ctx ends: never leave it
					// waiting for one (its Run would not return).
					outErr <- ctx.Err()
					return
				}
			case err := <-errs:
				outErr <- err
				return
			case <-ctx.Done():
				outErr <- ctx.Err()
				return
			}
		}
	}()
	return out, outErr
}

// eventsOf is the count of the events the streams reported, for those of
// ids they named.
func (c *counter) eventsOf(ids ...string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, id := range ids {
		if n := c.events[id]; n > 0 {
			out[id] = n
		}
	}
	return out
}

func (e *countingEngine) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	e.c.mu.Lock()
	e.c.inspects[id]++
	e.c.mu.Unlock()
	return e.engine.ContainerInspect(ctx, id)
}

func (e *countingEngine) ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error) {
	e.c.mu.Lock()
	e.c.lists++
	e.c.mu.Unlock()
	list, err := e.engine.ContainerList(ctx, o)
	if e.c.rewrite != nil {
		l := listed(list)
		e.c.rewrite(l)
		for i := range l {
			list[i] = l[i].Summary
		}
	}
	return list, err
}

func (e *countingEngine) ContainerListHealth(ctx context.Context, o container.ListOptions) ([]Listed, error) {
	e.c.mu.Lock()
	e.c.lists++
	e.c.mu.Unlock()
	list, err := e.engine.ContainerListHealth(ctx, o)
	if e.c.rewrite != nil {
		e.c.rewrite(list)
	}
	return list, err
}

// start runs the adapter until the test ends, and checks that Run returns
// once its context is cancelled and that the sink's calls never overlapped.
func start(t *testing.T, cfg Config, c *counter) (*followtest.Sink, *observer.ObservedLogs) {
	t.Helper()
	if cfg.Pace.Min == 0 {
		cfg.Pace.Min, cfg.Pace.Max = 20*time.Millisecond, 200*time.Millisecond
	}
	if c != nil && cfg.Resync == 0 {
		// The tests that count calls count a session's own: the periodic
		// re-listing (R6c, tested on its own) would add one every 10s on a
		// slow run.
		cfg.Resync = -1
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if c != nil {
		a.wrap = c.wrap
	}
	return followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
}

// waitLog waits for a log entry at level whose message or error field
// contains substr.
func waitLog(t *testing.T, logs *observer.ObservedLogs, level zapcore.Level, substr string) observer.LoggedEntry {
	t.Helper()
	return followtest.WaitLog(t, logs, waitTimeout, level, substr)
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // poll the condition
	}
}

// testCase names one test's containers: they carry caseLabel=ID.
type testCase struct{ ID string }

func newCase(t *testing.T) testCase {
	return testCase{ID: dockertest.RunID() + "-" + strings.ReplaceAll(t.Name(), "/", "-")}
}

// labels returns the case label plus the key, value pairs given.
func (tc testCase) labels(kv ...string) map[string]string {
	m := map[string]string{caseLabel: tc.ID}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func inspect(t *testing.T, cli *client.Client, id string) container.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("inspecting %s: %v", id, err)
	}
	return in
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func stopTimeout() container.StopOptions {
	one := 1
	return container.StopOptions{Timeout: &one}
}

// ---- tests -------------------------------------------------------------------

// The initial listing has every container, running or not, translated as
// an inspection would translate it, with no inspection at all; the connect
// log says how many and which API version was negotiated.
func TestListing(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	n1 := dockertest.CreateNetwork(t, cli, "list-n1")
	web := dockertest.Start(t, cli, dockertest.Options{
		Name:     "list-web",
		Labels:   tc.labels(catalog.LabelHost, "web.example.com", "app", "web"),
		Ports:    []string{"127.0.0.1::8080", "0.0.0.0::9000/udp"},
		Networks: []string{n1},
	})
	created := dockertest.Start(t, cli, dockertest.Options{Name: "list-created", Labels: tc.labels(), Ports: []string{"127.0.0.1::8080"}, NoStart: true})
	exited := dockertest.Start(t, cli, dockertest.Options{Name: "list-exited", Labels: tc.labels(), Ports: []string{"127.0.0.1::8080"}})
	paused := dockertest.Start(t, cli, dockertest.Options{Name: "list-paused", Labels: tc.labels()})
	healthy := dockertest.Start(t, cli, dockertest.Options{Name: "list-healthy", Labels: tc.labels(), Health: dockertest.HealthCheck(100*time.Millisecond, 0)})
	if err := cli.ContainerStop(ctx(t), exited.ID, stopTimeout()); err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerPause(ctx(t), paused.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, waitTimeout, "the health check to pass", func() bool {
		st := inspect(t, cli, healthy.ID).State
		return st.Health != nil && st.Health.Status == container.Healthy
	})

	c := newCounter()
	sink, logs := start(t, Config{}, c)
	v := sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })
	got := v.Labelled(caseLabel, tc.ID)
	if len(got) != 5 {
		t.Fatalf("listing has %d of the 5 containers: %v", len(got), got)
	}
	ids := []string{web.ID, created.ID, exited.ID, paused.ID, healthy.ID}
	if n := c.inspectsOf(ids...); len(n) != 0 {
		t.Errorf("the listing inspected containers %v, want none (the summary tells all)", n)
	}

	// Each matches what an inspection gives.
	for _, ctr := range []dockertest.Container{web, created, exited, paused, healthy} {
		want := fromInspect(inspect(t, cli, ctr.ID))
		if g := got[ctr.Name]; !reflect.DeepEqual(g, want) {
			t.Errorf("%s listed as\n  %+v\ninspected as\n  %+v", ctr.Name, g, want)
		}
	}

	w := got[web.Name]
	in := inspect(t, cli, web.ID)
	if w.ID != web.ID || w.State != catalog.StateRunning || w.Health != catalog.HealthNone ||
		w.Labels["app"] != "web" || w.Labels[catalog.LabelHost] != "web.example.com" || w.Labels[dockertest.RunLabel] != dockertest.RunID() {
		t.Errorf("web: %+v", w)
	}
	if len(w.Networks) != 2 || w.Networks[0].Network != "bridge" || w.Networks[1].Network != n1 {
		t.Fatalf("web networks %+v, want bridge and %s", w.Networks, n1)
	}
	for _, a := range w.Networks {
		ep := in.NetworkSettings.Networks[a.Network]
		if a.Address == "" || a.Gateway == "" || a.Address != ep.IPAddress || a.Gateway != ep.Gateway {
			t.Errorf("web on %s: %+v, Engine says IP %s gateway %s", a.Network, a, ep.IPAddress, ep.Gateway)
		}
	}
	if w.Networks[0].Address == w.Networks[1].Address || w.Networks[0].Gateway == w.Networks[1].Gateway {
		t.Errorf("web's two attachments share an address or gateway: %+v", w.Networks)
	}
	tcpPort := in.NetworkSettings.Ports["8080/tcp"][0].HostPort
	udpPort := in.NetworkSettings.Ports["9000/udp"][0].HostPort
	wantPorts := []catalog.PublishedPort{
		{HostIP: "127.0.0.1", HostPort: port(t, tcpPort), GuestPort: 8080, Protocol: catalog.TCP},
		{HostIP: "", HostPort: port(t, udpPort), GuestPort: 9000, Protocol: catalog.UDP},
	}
	if !reflect.DeepEqual(w.Ports, wantPorts) {
		t.Errorf("web ports %+v, want %+v (Engine: %v)", w.Ports, wantPorts, in.NetworkSettings.Ports)
	}

	for _, ctr := range []dockertest.Container{created, exited} {
		s := got[ctr.Name]
		if s.State != catalog.StateStopped || s.Health != catalog.HealthNone || len(s.Ports) != 0 ||
			len(s.Networks) != 1 || s.Networks[0].Network != "bridge" || s.Networks[0].Address != "" {
			t.Errorf("%s: %+v, want stopped on bridge without an address or ports", ctr.Name, s)
		}
	}
	if p := got[paused.Name]; p.State != catalog.StatePaused || p.Networks[0].Address == "" {
		t.Errorf("paused: %+v", p)
	}
	if h := got[healthy.Name]; h.State != catalog.StateRunning || h.Health != catalog.HealthHealthy {
		t.Errorf("healthy: %+v", h)
	}

	e := waitLog(t, logs, zapcore.InfoLevel, "connected to the Docker Engine")
	m := e.ContextMap()
	if n, _ := m["containers"].(int64); n < 5 || m["address"] != (Config{}).Resolved().Host {
		t.Errorf("connect log fields %v", m)
	}
	sv, err := cli.ServerVersion(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// The version the client negotiated: the Engine's, or the library's
	// own when the Engine's is newer (Docker 29: 1.55, the library 1.51).
	want := sv.APIVersion
	if versions.GreaterThan(want, api.DefaultVersion) {
		want = api.DefaultVersion
	}
	if m["api_version"] != want {
		t.Errorf("connect log api_version %v, want %s (the Engine serves %s)", m["api_version"], want, sv.APIVersion)
	}
}

func port(t *testing.T, s string) uint16 {
	t.Helper()
	var n uint16
	if _, err := fmt.Sscan(s, &n); err != nil || n == 0 {
		t.Fatalf("host port %q", s)
	}
	return n
}

// A running container whose health the listing's Status text does not
// tell (another Engine's wording, say) is inspected, and only it.
func TestListingInspectsUnknownHealth(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	odd := dockertest.Start(t, cli, dockertest.Options{Name: "odd", Labels: tc.labels(), Health: dockertest.HealthCheck(100*time.Millisecond, 0)})
	plain := dockertest.Start(t, cli, dockertest.Options{Name: "odd-plain", Labels: tc.labels()})
	waitUntil(t, waitTimeout, "the health check to pass", func() bool {
		st := inspect(t, cli, odd.ID).State
		return st.Health != nil && st.Health.Status == container.Healthy
	})
	c := newCounter()
	c.rewrite = func(list []Listed) {
		for i := range list {
			if list[i].ID == odd.ID {
				list[i].Status = "Up 3 seconds (looking good)"
				if list[i].Health != nil { // Docker 29 (HealthInList)
					list[i].Health.Status = "looking good"
				}
			}
		}
	}
	sink, logs := start(t, Config{}, c)
	v := sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })
	if in := v.ByID[odd.ID]; in.State != catalog.StateRunning || in.Health != catalog.HealthHealthy {
		t.Errorf("odd: %+v, want running and healthy (from an inspection)", in)
	}
	if got, want := c.inspectsOf(odd.ID, plain.ID), map[string]int{odd.ID: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("inspections %v, want %v", got, want)
	}
	e := waitLog(t, logs, zapcore.InfoLevel, "connected to the Docker Engine")
	if n, _ := e.ContextMap()["inspected_for_health"].(int64); n < 1 {
		t.Errorf("connect log %v does not say containers were inspected", e.ContextMap())
	}
}

// Each kind of container event reaches the sink within eventTimeout.
func TestEvents(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	n1 := dockertest.CreateNetwork(t, cli, "ev-n1")
	sink, _ := start(t, Config{}, nil)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })

	c := dockertest.Start(t, cli, dockertest.Options{Name: "ev", Labels: tc.labels("app", "ev"), Ports: []string{"127.0.0.1::8080"}, NoStart: true})
	step := func(what string, act func() error, cond func(catalog.Instance, bool) bool) {
		t.Helper()
		if act != nil {
			if err := act(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		sink.WaitFor(t, eventTimeout, what, func(v view) bool {
			in, ok := v.ByID[c.ID]
			return cond(in, ok)
		})
	}
	step("create", nil, func(in catalog.Instance, ok bool) bool {
		return ok && in.State == catalog.StateStopped && in.Name == c.Name && in.Labels["app"] == "ev"
	})
	step("start", func() error { return cli.ContainerStart(ctx(t), c.ID, container.StartOptions{}) }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StateRunning && len(in.Networks) == 1 && in.Networks[0].Address != "" &&
			len(in.Ports) == 1 && in.Ports[0].GuestPort == 8080 && in.Ports[0].HostIP == "127.0.0.1"
	})
	step("stop", func() error { return cli.ContainerStop(ctx(t), c.ID, stopTimeout()) }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StateStopped && len(in.Ports) == 0
	})
	step("restart", func() error { return cli.ContainerStart(ctx(t), c.ID, container.StartOptions{}) }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StateRunning
	})
	step("pause", func() error { return cli.ContainerPause(ctx(t), c.ID) }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StatePaused
	})
	step("unpause", func() error { return cli.ContainerUnpause(ctx(t), c.ID) }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StateRunning
	})
	renamed := dockertest.Name("ev-renamed")
	step("rename", func() error { return cli.ContainerRename(ctx(t), c.ID, renamed) }, func(in catalog.Instance, _ bool) bool {
		return in.Name == renamed
	})
	step("network connect", func() error { return cli.NetworkConnect(ctx(t), n1, c.ID, nil) }, func(in catalog.Instance, _ bool) bool {
		return len(in.Networks) == 2 && in.Networks[1].Network == n1 && in.Networks[1].Address != ""
	})
	step("network disconnect", func() error { return cli.NetworkDisconnect(ctx(t), n1, c.ID, false) }, func(in catalog.Instance, _ bool) bool {
		return len(in.Networks) == 1 && in.Networks[0].Network == "bridge"
	})
	step("kill (die)", func() error { return cli.ContainerKill(ctx(t), c.ID, "KILL") }, func(in catalog.Instance, _ bool) bool {
		return in.State == catalog.StateStopped
	})
	step("remove", func() error {
		return cli.ContainerRemove(ctx(t), c.ID, container.RemoveOptions{Force: true})
	}, func(_ catalog.Instance, ok bool) bool { return !ok })
}

// A health check's verdicts reach the sink: starting (failures in the start
// period do not count), healthy once the check passes, unhealthy after the
// test makes the server fail it, healthy again.
func TestHealth(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	sink, _ := start(t, Config{}, nil)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })

	c := dockertest.Start(t, cli, dockertest.Options{
		Name:   "health",
		Labels: tc.labels(),
		Env:    []string{"HEALTH=bad"},
		Health: dockertest.HealthCheck(200*time.Millisecond, time.Minute),
		Ports:  []string{"127.0.0.1::8080"},
	})
	health := func(want catalog.Health) func(v view) bool {
		return func(v view) bool {
			in := v.ByID[c.ID]
			return in.State == catalog.StateRunning && in.Health == want
		}
	}
	sink.WaitFor(t, eventTimeout, "running, health starting", health(catalog.HealthStarting))

	addr := dockertest.PublishedAddr(t, cli, c, "8080/tcp")
	var last string
	waitUntil(t, waitTimeout, "the server in the container to answer", func() bool {
		code, body, err := dockertest.Get(ctx(t), addr, "/")
		last = fmt.Sprintf("%d %q %v", code, body, err)
		return err == nil && code == 200 && body == "hello from health\n"
	})
	t.Logf("GET / = %s", last)
	post := func(path string) {
		t.Helper()
		if code, _, err := dockertest.Post(ctx(t), addr, path); err != nil || code != 200 {
			t.Fatalf("POST %s = %d %v", path, code, err)
		}
	}
	// The Engine's verdict comes at its own pace: a check is an exec in
	// the container every 200 ms, which can take seconds on a loaded
	// machine. What the adapter owes is the verdict in the sink within
	// eventTimeout of the Engine's event, so the test waits for the
	// Engine's verdict first (as the Engine reports it), then for the sink.
	verdict := func(path string, want container.HealthStatus, what string, in catalog.Health) {
		t.Helper()
		post(path)
		waitUntil(t, waitTimeout, "the Engine's health check to say "+string(want), func() bool {
			st := inspect(t, cli, c.ID).State
			return st.Health != nil && st.Health.Status == want
		})
		sink.WaitFor(t, eventTimeout, what, health(in))
	}
	verdict("/health/good", container.Healthy, "healthy", catalog.HealthHealthy)
	verdict("/health/bad", container.Unhealthy, "unhealthy", catalog.HealthUnhealthy)
	verdict("/health/good", container.Healthy, "healthy again", catalog.HealthHealthy)
}

// With 20 containers existing, an event costs one inspection at most, of
// the container it names and none of the others, and the listing costs
// none.
func TestPerEventCost(t *testing.T) {
	t.Parallel()
	const n = 20
	cli := dockertest.Client(t)
	tc := newCase(t)
	var ids []string
	others := make([]dockertest.Container, 0, n)
	for i := range n {
		c := dockertest.Start(t, cli, dockertest.Options{Name: fmt.Sprintf("cost-%02d", i), Labels: tc.labels(), NoStart: true})
		others = append(others, c)
		ids = append(ids, c.ID)
	}
	began := time.Now()
	target := dockertest.Start(t, cli, dockertest.Options{Name: "cost-target", Labels: tc.labels()})
	ids = append(ids, target.ID)
	// The Engine may log a start event a moment after the start call has
	// returned: one logged after the adapter subscribed would be replayed
	// to it, at the cost of a spare inspection. Start following only once
	// it is logged, so that every inspection counted is for an event below.
	awaitEvent(t, cli, target.ID, "start", began)

	c := newCounter()
	sink, _ := start(t, Config{}, c)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return v.Replaces >= 1 })
	if got := len(sink.Snapshot().Labelled(caseLabel, tc.ID)); got != n+1 {
		t.Fatalf("listing has %d of the %d containers", got, n+1)
	}
	if got := c.inspectsOf(ids...); len(got) != 0 {
		t.Fatalf("inspections at listing: %v, want none", got)
	}

	if err := cli.ContainerPause(ctx(t), target.ID); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "pause", func(v view) bool { return v.ByID[target.ID].State == catalog.StatePaused })
	if err := cli.ContainerUnpause(ctx(t), target.ID); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "unpause", func(v view) bool { return v.ByID[target.ID].State == catalog.StateRunning })
	renamed := dockertest.Name("cost-renamed")
	if err := cli.ContainerRename(ctx(t), others[7].ID, renamed); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "rename", func(v view) bool { return v.ByID[others[7].ID].Name == renamed })

	// Events are applied in order, so by now every earlier one has been.
	// The adapter's guarantee is one inspection at most per event the
	// stream reports, of the container it names (events of one container
	// reported while it waits to inspect share the inspection), and none
	// for the listing. It is held to the events its stream did report:
	// the Engine logs one per call above, and an event more (the Engine's
	// own, or one it replays) costs its inspection too, which the adapter
	// cannot tell from the others.
	c.mu.Lock()
	lists := c.lists
	c.mu.Unlock()
	got, evs := c.inspectsOf(ids...), c.eventsOf(ids...)
	for _, id := range ids {
		if got[id] > evs[id] {
			t.Fatalf("inspections %v for the events %v (at most one per event, for the container it names); %d listings, %d Replace calls",
				got, evs, lists, sink.Snapshot().Replaces)
		}
	}
	// Each call above was waited for in the sink, so none shared another's.
	if got[target.ID] < 2 || got[others[7].ID] < 1 {
		t.Fatalf("inspections %v, want 2 of the paused and unpaused container and 1 of the renamed one", got)
	}
	if want := map[string]int{target.ID: 2, others[7].ID: 1}; !reflect.DeepEqual(evs, want) {
		t.Logf("the Engine reported the events %v for the calls of %v", evs, want)
	}
	if lists != 1 {
		t.Errorf("%d listings, want 1", lists)
	}
}

// awaitEvent waits until the Engine has logged the event action for the
// container id, since since.
func awaitEvent(t *testing.T, cli *client.Client, id, action string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	msgs, errs := cli.Events(ctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: filters.NewArgs(filters.Arg("container", id), filters.Arg("event", action)),
	})
	select {
	case <-msgs:
	case err := <-errs:
		t.Fatalf("waiting for the %s event of %s: %v", action, id, err)
	}
}

// A cut event stream (an Engine restart, say) makes the adapter reconnect
// and re-list; while the Engine cannot be reached the sink keeps what it
// had; a container removed meanwhile leaves the sink at the re-listing and
// one started meanwhile joins it.
func TestStreamCut(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	proxy := dockertest.NewSocketProxy(t)
	keep := dockertest.Start(t, cli, dockertest.Options{Name: "cut-keep", Labels: tc.labels()})
	gone := dockertest.Start(t, cli, dockertest.Options{Name: "cut-gone", Labels: tc.labels()})

	sink, logs := start(t, Config{Host: proxy.Host()}, nil)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool {
		return v.Replaces == 1 && len(v.Labelled(caseLabel, tc.ID)) == 2
	})

	// A cut with the Engine still there: reconnect at once, re-list.
	if n := proxy.Cut(); n == 0 {
		t.Fatal("the proxy had no connection to cut")
	}
	sink.WaitFor(t, waitTimeout, "the re-listing after a cut", func(v view) bool { return v.Replaces == 2 })
	waitLog(t, logs, zapcore.WarnLevel, "lost the Docker Engine")
	waitLog(t, logs, zapcore.InfoLevel, "reconnected to the Docker Engine")

	// Now the Engine is "down" for a while.
	proxy.SetDown(true)
	before := proxy.Accepted()
	if err := cli.ContainerRemove(ctx(t), gone.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	late := dockertest.Start(t, cli, dockertest.Options{Name: "cut-late", Labels: tc.labels()})
	waitUntil(t, waitTimeout, "reconnection attempts while down", func() bool { return proxy.Accepted() >= before+3 })
	v := sink.Snapshot()
	if _, ok := v.ByID[gone.ID]; !ok || v.Replaces != 2 {
		t.Fatalf("while the Engine is unreachable the sink changed: has gone=%v, %d replaces", ok, v.Replaces)
	}
	errLogs := logs.FilterLevelExact(zapcore.ErrorLevel)
	if errLogs.Len() != 1 || !strings.Contains(errLogs.All()[0].Message, "still routing to the containers it last reported") {
		t.Errorf("want one error log for the outage; logs:\n%s", followtest.DumpLogs(logs))
	}

	proxy.SetDown(false)
	v = sink.WaitFor(t, waitTimeout, "the re-listing once the Engine is back", func(v view) bool { return v.Replaces == 3 })
	if _, ok := v.ByID[gone.ID]; ok {
		t.Error("the container removed during the outage is still in the sink")
	}
	if _, ok := v.ByID[keep.ID]; !ok {
		t.Error("the container that stayed left the sink")
	}
	if in, ok := v.ByID[late.ID]; !ok || in.State != catalog.StateRunning {
		t.Errorf("the container started during the outage: %+v, %v", in, ok)
	}
	// And the new session follows events.
	if err := cli.ContainerPause(ctx(t), keep.ID); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "an event after the reconnection", func(v view) bool { return v.ByID[keep.ID].State == catalog.StatePaused })
}

// An Engine that cannot be reached at the start is logged once at error
// level (then at debug level), and followed as soon as it can be.
func TestEngineDownAtStart(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	proxy := dockertest.NewSocketProxy(t)
	proxy.SetDown(true)
	c := dockertest.Start(t, cli, dockertest.Options{Name: "down", Labels: tc.labels()})

	sink, logs := start(t, Config{Host: proxy.Host()}, nil)
	e := waitLog(t, logs, zapcore.ErrorLevel, "none of its containers are routed to")
	if e.ContextMap()["address"] != proxy.Host() || e.ContextMap()["error"] == "" {
		t.Errorf("error log fields %v", e.ContextMap())
	}
	waitUntil(t, waitTimeout, "several attempts", func() bool { return proxy.Accepted() >= 4 })
	waitLog(t, logs, zapcore.DebugLevel, "still cannot follow the Docker Engine")
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
		t.Errorf("%d error logs, want 1 for one reason; logs:\n%s", n, followtest.DumpLogs(logs))
	}
	if sink.Snapshot().Replaces != 0 {
		t.Fatal("the sink was fed while the Engine was down")
	}

	proxy.SetDown(false)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.ByID[c.ID]; return ok })
	waitLog(t, logs, zapcore.InfoLevel, "connected to the Docker Engine")
	if logs.FilterMessageSnippet("reconnected").Len() != 0 {
		t.Error("the first connection was logged as a reconnection")
	}
}

// The library speaks a newer API than this Engine: the adapter's client
// negotiates down to the Engine's version, where a client pinned to the
// library's default would be refused.
func TestAPIVersionNegotiation(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	sv, err := cli.ServerVersion(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Engine %s, API %s (min %s); library default API %s", sv.Version, sv.APIVersion, sv.MinAPIVersion, api.DefaultVersion)

	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := a.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if _, err := ac.ContainerList(ctx(t), container.ListOptions{All: true}); err != nil {
		t.Fatalf("listing with the adapter's client: %v", err)
	}
	want := sv.APIVersion
	if versions.GreaterThan(want, api.DefaultVersion) {
		want = api.DefaultVersion
	}
	if ac.ClientVersion() != want {
		t.Errorf("negotiated API %s, want %s", ac.ClientVersion(), want)
	}

	if versions.LessThan(sv.APIVersion, api.DefaultVersion) {
		pinned, err := client.NewClientWithOpts(client.WithHost(dockertest.EngineHost()), client.WithVersion(api.DefaultVersion))
		if err != nil {
			t.Fatal(err)
		}
		defer pinned.Close()
		if _, err := pinned.ContainerList(ctx(t), container.ListOptions{}); err == nil {
			t.Errorf("a client pinned to API %s was not refused by an Engine speaking %s: negotiation proves nothing here", api.DefaultVersion, sv.APIVersion)
		} else {
			t.Logf("without negotiation: %v", err)
		}
	} else {
		t.Logf("this Engine speaks API %s, not older than the library's %s: only the negotiated version is checked", sv.APIVersion, api.DefaultVersion)
	}
}

// A TLS-protected Engine (here: a TLS proxy on loopback requiring a client
// certificate) is followed with the ca, cert and key settings; a wrong CA
// is an error naming the TLS failure.
func TestTLSEngine(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	tc := newCase(t)
	files := writeTLSFiles(t)
	addr := tlsProxy(t, files)
	c := dockertest.Start(t, cli, dockertest.Options{Name: "tls", Labels: tc.labels()})

	host := "tcp://" + addr
	if DaemonHost(host) != "" {
		t.Errorf("DaemonHost(%s) = %q, want \"\" for loopback", host, DaemonHost(host))
	}
	sink, logs := start(t, Config{Host: host, CAFile: files.ca, CertFile: files.cert, KeyFile: files.key}, nil)
	sink.WaitFor(t, waitTimeout, "the listing over TLS", func(v view) bool { _, ok := v.ByID[c.ID]; return ok })
	if err := cli.ContainerPause(ctx(t), c.ID); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "an event over TLS", func(v view) bool { return v.ByID[c.ID].State == catalog.StatePaused })
	e := waitLog(t, logs, zapcore.InfoLevel, "connected to the Docker Engine")
	if e.ContextMap()["address"] != host {
		t.Errorf("connect log address %v, want %s", e.ContextMap()["address"], host)
	}

	// A CA that did not sign the Engine's certificate.
	other := writeTLSFiles(t)
	bad, badLogs := start(t, Config{Host: host, CAFile: other.ca, CertFile: files.cert, KeyFile: files.key}, nil)
	waitLog(t, badLogs, zapcore.ErrorLevel, "TLS handshake failed")
	if bad.Snapshot().Replaces != 0 {
		t.Error("listed through an unverified TLS connection")
	}
	// No client certificate: the Engine refuses the handshake.
	nocert, nocertLogs := start(t, Config{Host: host, CAFile: files.ca}, nil)
	waitLog(t, nocertLogs, zapcore.ErrorLevel, "TLS handshake failed")
	if nocert.Snapshot().Replaces != 0 {
		t.Error("listed without a client certificate")
	}
}

// tlsProxy serves TLS on a loopback port, requiring a client certificate
// signed by files' CA, and forwards each connection to the Engine.
func tlsProxy(t *testing.T, files tlsFiles) string {
	t.Helper()
	serverCert, serverKey := newCert(t, files.caCert, files.caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(files.caCert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{serverCert.Raw}, PrivateKey: serverKey, Leaf: serverCert}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dockertest.EngineHost())
	if err != nil {
		t.Fatal(err)
	}
	network, address := "unix", u.Path
	if u.Scheme == "tcp" {
		network, address = "tcp", u.Host
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if add && conns == nil {
			return false
		}
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
		return true
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				e, err := net.Dial(network, address)
				if err != nil {
					return
				}
				defer e.Close()
				if !track(c, true) {
					return
				}
				track(e, true)
				defer track(c, false)
				defer track(e, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(e, c); _ = e.Close(); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, e); _ = c.Close(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// R6: after a long outage (the Engine's socket refusing every
// connection), a container started meanwhile is in the sink within a
// second of the Engine's return: a unix socket is retried at the connect
// pace (follow.LocalConnectMax), whatever the outage's length, with the
// default pace otherwise.
func TestReturnAfterLongOutageWithinASecond(t *testing.T) {
	t.Parallel()
	const outage = 30 * time.Second
	cli := dockertest.Client(t)
	tc := newCase(t)
	proxy := dockertest.NewSocketProxy(t)
	before := dockertest.Start(t, cli, dockertest.Options{Name: "outage-before", Labels: tc.labels()})
	sink, logs := start(t, Config{Host: proxy.Host(), Pace: follow.Pace{Min: follow.DefaultMinBackoff}}, nil)
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.ByID[before.ID]; return ok })

	proxy.SetDown(true)
	over := time.NewTimer(outage)
	defer over.Stop()
	waitLog(t, logs, zapcore.WarnLevel, "lost the Docker Engine")
	late := dockertest.Start(t, cli, dockertest.Options{Name: "outage-late", Labels: tc.labels()})
	<-over.C // the outage's length is the scenario, not a wait for the adapter
	proxy.SetDown(false)
	back := time.Now()
	attempts := proxy.Accepted()
	// The pace is ours: the first connection after the return must come
	// within the connect pace's cap (LocalConnectMax), whatever the
	// outage's length. What follows it (the listing, the inspects) is the
	// Engine's time, which a machine busy with other builds stretches: it
	// is logged, and bounded only by the wait's deadline.
	waitUntil(t, waitTimeout, "a connection after the Engine's return", func() bool { return proxy.Accepted() > attempts })
	reconnect := time.Since(back)
	sink.WaitFor(t, waitTimeout, "the container started during the outage", func(v view) bool {
		in, ok := v.ByID[late.ID]
		return ok && in.State == catalog.StateRunning
	})
	took := time.Since(back)
	t.Logf("after a %v outage, reconnected %v and the container started meanwhile was in the sink %v after the Engine's return (%d connections refused meanwhile)",
		outage, reconnect.Round(time.Millisecond), took.Round(time.Millisecond), attempts)
	if reconnect > follow.LocalConnectMax+250*time.Millisecond {
		t.Errorf("reconnected %v after the Engine's return, want within the connect pace's cap %v (and its jitter)", reconnect, follow.LocalConnectMax)
	}
}
