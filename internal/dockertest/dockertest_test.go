package dockertest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// The tests of this package run one after the other: TestCleanup removes
// every container of the run.

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestRunIDAndName(t *testing.T) {
	if id := RunID(); !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(id) || RunID() != id {
		t.Fatalf("RunID %q", RunID())
	}
	if got := Name("web"); got != "cdt-"+RunID()+"-web" {
		t.Fatalf("Name = %q", got)
	}
}

// The image is built once, from nothing but the helloserver binary, and
// found again by its content tag.
func TestBuildImage(t *testing.T) {
	cli := Client(t)
	ref, err := BuildImage(ctx(t), cli)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(ImageRepo) + `:[0-9a-f]{12}$`).MatchString(ref) {
		t.Fatalf("image reference %q", ref)
	}
	if again, err := BuildImage(ctx(t), cli); err != nil || again != ref {
		t.Fatalf("second BuildImage = %q, %v; want %q", again, err, ref)
	}
	// Past the sync.Once: an image with the same content tag is reused.
	start := time.Now()
	if again, err := buildImage(ctx(t), cli); err != nil || again != ref {
		t.Fatalf("buildImage with the image present = %q, %v; want %q", again, err, ref)
	}
	t.Logf("found %s again in %v (compile + lookup)", ref, time.Since(start))
	img, err := cli.ImageInspect(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config == nil || len(img.Config.Entrypoint) != 1 || img.Config.Entrypoint[0] != "/hello" {
		t.Errorf("entrypoint %v", img.Config)
	}
	if img.Config.Healthcheck == nil || len(img.Config.Healthcheck.Test) == 0 || img.Config.Healthcheck.Test[0] != "NONE" {
		t.Errorf("health check %v, want NONE", img.Config.Healthcheck)
	}
	if _, ok := img.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v", img.Config.ExposedPorts)
	}
	if len(img.RootFS.Layers) != 1 {
		t.Errorf("%d layers, want 1 (FROM scratch + the binary)", len(img.RootFS.Layers))
	}
}

// A started container carries the run label, serves hello on its
// published loopback port, and its health follows POST /health/bad|good
// through the -healthcheck probe.
func TestStartServeAndHealth(t *testing.T) {
	cli := Client(t)
	net1 := CreateNetwork(t, cli, "dt-net")
	c := Start(t, cli, Options{
		Name:     "dt-hello",
		Labels:   map[string]string{"app": "hello"},
		Health:   HealthCheck(100*time.Millisecond, 0),
		Ports:    []string{"127.0.0.1::8080"},
		Networks: []string{net1},
	})
	if c.Name != Name("dt-hello") || c.ID == "" {
		t.Fatalf("container %+v", c)
	}
	in, err := cli.ContainerInspect(ctx(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.Labels[RunLabel] != RunID() || in.Config.Labels["app"] != "hello" {
		t.Errorf("labels %v", in.Config.Labels)
	}
	if _, ok := in.NetworkSettings.Networks[net1]; !ok {
		t.Errorf("not on %s: %v", net1, in.NetworkSettings.Networks)
	}
	addr := PublishedAddr(t, cli, c, "8080/tcp")
	waitHealth := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			in, err := cli.ContainerInspect(ctx(t), c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if in.State.Health != nil && in.State.Health.Status == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health %+v, want %s", in.State.Health, want)
			}
			time.Sleep(20 * time.Millisecond) // poll the condition
		}
	}
	waitHealth(container.Healthy)
	code, body, err := Get(ctx(t), addr, "/")
	if err != nil || code != 200 || body != "hello from dt-hello\n" {
		t.Fatalf("GET / = %d %q %v", code, body, err)
	}
	if code, _, err := Post(ctx(t), addr, "/health/bad"); err != nil || code != 200 {
		t.Fatalf("POST /health/bad = %d %v", code, err)
	}
	if code, _, _ := Get(ctx(t), addr, "/healthz"); code != 503 {
		t.Fatalf("GET /healthz after /health/bad = %d, want 503", code)
	}
	waitHealth(container.Unhealthy)
	if code, _, err := Post(ctx(t), addr, "/health/good"); err != nil || code != 200 {
		t.Fatalf("POST /health/good = %d %v", code, err)
	}
	waitHealth(container.Healthy)
}

// Get and Post refuse anything but loopback.
func TestHTTPOnlyToLoopback(t *testing.T) {
	for _, addr := range []string{"10.0.0.1:80", "[::1]:80", "example.com:80", "172.17.0.2:8080", "nonsense"} {
		if _, _, err := Get(context.Background(), addr, "/"); err == nil {
			t.Errorf("Get(%s) was sent", addr)
		}
	}
}

// The proxy forwards to the Engine, cuts connections and refuses while
// down.
func TestSocketProxy(t *testing.T) {
	Client(t) // the proxy forwards to the Engine: skipped under -short, failed without it
	p := NewSocketProxy(t)
	cli, err := client.NewClientWithOpts(client.WithHost(p.Host()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx(t)); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	// The stream on a client of its own, so that it opens a connection of
	// its own: cut once the proxy has it (a cut before it would only close
	// an idle connection, and the stream would open a new one). The API
	// version is the first client's: negotiating would send a ping first,
	// and the proxy would count the ping's connection, not the stream's.
	cli.NegotiateAPIVersion(ctx(t))
	events2, err := client.NewClientWithOpts(client.WithHost(p.Host()), client.WithVersion(cli.ClientVersion()))
	if err != nil {
		t.Fatal(err)
	}
	defer events2.Close()
	before := p.Accepted()
	msgs, errs := events2.Events(sctx, events.ListOptions{})
	for deadline := time.Now().Add(10 * time.Second); p.Accepted() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the event stream never reached the proxy")
		}
	}
	if n := p.Cut(); n == 0 {
		t.Fatal("nothing to cut")
	}
	// The stream's reader hands each event on before it reads further,
	// and the Engine's events are every test's on this machine: they are
	// read (and dropped) until the reader gets to the cut, or it would
	// wait on the first one for ever.
	timeout := time.After(10 * time.Second)
	for cut := false; !cut; {
		select {
		case <-msgs:
		case err := <-errs:
			if strings.Contains(err.Error(), "Error response from daemon") {
				t.Fatalf("the Engine refused the stream, it was not cut: %v", err)
			}
			t.Logf("event stream after the cut: %v", err)
			cut = true
		case <-timeout:
			t.Fatal("the event stream survived the cut")
		}
	}
	p.SetDown(true)
	if _, err := cli.Ping(ctx(t)); err == nil {
		t.Fatal("ping succeeded through a proxy that is down")
	}
	p.SetDown(false)
	if _, err := cli.Ping(ctx(t)); err != nil {
		t.Fatalf("ping once the proxy is up again: %v", err)
	}
	if p.Accepted() < 3 {
		t.Errorf("accepted %d connections", p.Accepted())
	}
}

// Cleanup removes every container and network of the run, running or not.
func TestCleanup(t *testing.T) {
	cli := Client(t)
	for _, o := range []Options{{Name: "dt-clean-1"}, {Name: "dt-clean-2", NoStart: true}} {
		if c, err := StartContainer(ctx(t), cli, o); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	f := filters.NewArgs(filters.Arg("label", RunLabel+"="+RunID()))
	list, err := cli.ContainerList(ctx(t), container.ListOptions{All: true, Filters: f})
	if err != nil || len(list) < 2 {
		t.Fatalf("before: %d containers, %v", len(list), err)
	}
	if err := Cleanup(ctx(t), cli); err != nil {
		t.Fatal(err)
	}
	list, err = cli.ContainerList(ctx(t), container.ListOptions{All: true, Filters: f})
	if err != nil || len(list) != 0 {
		var names []string
		for _, c := range list {
			names = append(names, strings.Join(c.Names, ","))
		}
		t.Fatalf("after Cleanup: %v, %v", names, err)
	}
}
