package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// EnvPodmanHost names the socket of a Podman API service (as
// unix:///path); `make test-podman` sets it, and EnvPodmanMode
// ("rootful" or "rootless"). Without it the Podman side is skipped.
const (
	EnvPodmanHost = "CADDY_DICER_PODMAN_HOST"
	EnvPodmanMode = "CADDY_DICER_PODMAN"
)

// The same container life on the Docker Engine and on Podman, side by
// side in one run (R11p): start to running in the catalog and to the first
// 200 through its published port, stop to out of rotation, removal. On
// Podman also: the health verdict comes from checks the test runs (no
// systemd: Podman's own timers never run), and checks that change nothing
// make no catalog write; a rootless container has no address, and its
// published port is the way in.
func TestPodman_engine_side_by_side(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker Engine and, for its Podman half, make test-podman")
	}
	daemons := []struct{ name, host string }{{"docker", dockertest.DefaultEngineHost}}
	if h := os.Getenv(EnvPodmanHost); h != "" {
		daemons = append(daemons, struct{ name, host string }{"podman-" + os.Getenv(EnvPodmanMode), h})
	} else {
		t.Logf("%s not set: the Engine side only (make test-podman runs both)", EnvPodmanHost)
	}
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) { podmanSideBySide(t, d.host) })
	}
}

func podmanSideBySide(t *testing.T, host string) {
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	if _, err := cli.Ping(ctx(t)); err != nil {
		t.Fatalf("%s does not answer: %v", host, err)
	}
	podman := host != dockertest.DefaultEngineHost
	rootless := podman && os.Getenv(EnvPodmanMode) == "rootless"
	tc := newCase(t)
	sink, _ := start(t, Config{Host: host}, newCounter())

	c := dockertest.Start(t, cli, dockertest.Options{Name: "sbs", Labels: tc.labels("app", "sbs"),
		Ports: []string{"127.0.0.1::8080"}, NoStart: true})
	sink.WaitFor(t, waitTimeout, "the created container", func(v view) bool { _, ok := v.Named(c.Name); return ok })
	t0 := time.Now()
	if err := cli.ContainerStart(ctx(t), c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	v := sink.WaitFor(t, eventTimeout, "running in the catalog", func(v view) bool {
		in, _ := v.Named(c.Name)
		// No check (HEALTHCHECK NONE): routable, on Podman too.
		return in.State == catalog.StateRunning && in.Health == catalog.HealthNone && len(in.Ports) == 1
	})
	toCatalog := time.Since(t0)
	in, _ := v.Named(c.Name)
	if rootless {
		for _, a := range in.Networks {
			if a.Address != "" {
				t.Errorf("a rootless container with the address %q on %s; Podman gives none", a.Address, a.Network)
			}
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(int(in.Ports[0].HostPort))
	waitUntil(t, waitTimeout, "a 200 through the published port", func() bool {
		code, _, err := dockertest.Get(ctx(t), addr, "/")
		return err == nil && code == 200
	})
	toFirst200 := time.Since(t0)

	if podman {
		podmanChecks(t, cli, host, sink, tc)
	}

	t1 := time.Now()
	ten := 10
	stopped := make(chan error, 1)
	go func() { stopped <- cli.ContainerStop(context.Background(), c.ID, container.StopOptions{Timeout: &ten}) }()
	waitUntil(t, waitTimeout, "out of rotation", func() bool {
		in, _ := sink.Snapshot().Named(c.Name)
		return sink.IsStopping(c.ID) || in.State != catalog.StateRunning
	})
	toOut := time.Since(t1)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerRemove(ctx(t), c.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, eventTimeout, "gone after its removal (destroy, or Podman's remove)", func(v view) bool { _, ok := v.Named(c.Name); return !ok })
	t.Logf("measured %s: start to running in the catalog %v, to the first 200 %v; stop to out of rotation %v",
		host, toCatalog.Round(time.Millisecond), toFirst200.Round(time.Millisecond), toOut.Round(time.Millisecond))
}

// podmanChecks runs a container with a health check on Podman and runs
// its checks through the podman CLI (remote, on the same service): it is
// starting until a check passes, then healthy; 20 more checks that change
// nothing make no catalog write. Its label caddy-dicer.test.checks=manual
// keeps make test-podman's loop, which runs every other container's checks
// as systemd's timers would, off it: a check of the loop's would make it
// healthy before the test has seen it starting.
func podmanChecks(t *testing.T, cli *client.Client, host string, sink *followtest.Sink, tc testCase) {
	c := dockertest.Start(t, cli, dockertest.Options{Name: "sbs-hc", Labels: tc.labels("app", "sbs-hc", "caddy-dicer.test.checks", "manual"),
		Health: dockertest.HealthCheck(time.Hour, 0)})
	sink.WaitFor(t, waitTimeout, "starting, not routable", func(v view) bool {
		in, _ := v.Named(c.Name)
		return in.State == catalog.StateRunning && in.Health == catalog.HealthStarting
	})
	check := func() {
		out, err := exec.Command("podman", "--remote", "--url", host, "healthcheck", "run", c.ID).CombinedOutput()
		if err != nil {
			t.Logf("podman healthcheck run: %v: %s", err, out)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for !sink.Check(func(v view) bool { in, _ := v.Named(c.Name); return in.Health == catalog.HealthHealthy }) {
		if time.Now().After(deadline) {
			t.Fatalf("not healthy after its checks: %v", sink.Snapshot())
		}
		check()
	}
	before := sink.Puts()
	const checks = 20
	for range checks {
		check()
	}
	// A last change to wait on: a stop, which is a write.
	if err := cli.ContainerKill(ctx(t), c.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, waitTimeout, "the checked container stopped", func(v view) bool {
		in, _ := v.Named(c.Name)
		return in.State != catalog.StateRunning
	})
	// The kill is there to wait on: its writes (one to three, as Podman's
	// kill, died and inspections fall) say the container is down; any
	// write of it still running came from a check.
	var byChecks, byKill int
	for _, in := range sink.PutsSince(before) {
		switch {
		case in.Name != c.Name:
		case in.State == catalog.StateRunning:
			byChecks++
		default:
			byKill++
		}
	}
	if byChecks > 0 {
		t.Errorf("%d health checks that changed nothing: %d catalog writes of the container still running, want 0", checks, byChecks)
	}
	t.Logf("%d unchanged health checks on Podman: %d catalog writes; then a kill: %d", checks, byChecks, byKill)
}

// A wake of a container removed before Caddy heard so (Podman's events
// come late) is told apart from a failed one (R5c): the Engine's and
// Podman's answers to a start of a removed container are Gone, not
// Denied, so the waker wakes another instead of backing off.
func TestPodman_start_of_a_removed_container_is_gone(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker Engine and, for its Podman half, make test-podman")
	}
	hosts := map[string]string{"docker": dockertest.DefaultEngineHost}
	if h := os.Getenv(EnvPodmanHost); h != "" {
		hosts["podman-"+os.Getenv(EnvPodmanMode)] = h
	}
	for name, host := range hosts {
		t.Run(name, func(t *testing.T) {
			cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			labels := newCase(t).labels(catalog.LabelStandbyAfter, "1h")
			c := dockertest.Start(t, cli, dockertest.Options{Name: "gone", Labels: labels, NoStart: true})
			if err := cli.ContainerRemove(ctx(t), c.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			a, err := New(Config{Host: host})
			if err != nil {
				t.Fatal(err)
			}
			x := a.Actions()
			defer x.Close()
			err = x.Start(ctx(t), c.ID, labels)
			if err == nil || !Gone(err) || Denied(err) {
				t.Errorf("start of a removed container: %v (gone %v, denied %v), want gone", err, Gone(err), Denied(err))
			}
			if Gone(errors.New("connection refused")) || Gone(nil) {
				t.Error("Gone reads other errors as gone")
			}
		})
	}
}
