package docker

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// readmeAllowLists reads the socket proxy's allow-lists from the ```text
// block under "Least privilege" in docs/scale-to-zero.md: the line after
// "# routing only" (GET and HEAD) and the line after "# scale to zero
// adds" (POST), so that what the docs tell operators is what is tested.
func readmeAllowLists(t *testing.T) (reads, wakes *regexp.Regexp) {
	t.Helper()
	b, err := os.ReadFile("../../docs/scale-to-zero.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	after := func(marker string) *regexp.Regexp {
		for i, l := range lines {
			if strings.HasPrefix(l, marker) && i+1 < len(lines) {
				re, err := regexp.Compile(lines[i+1])
				if err != nil {
					t.Fatalf("docs/scale-to-zero.md's allow-list after %q: %v", marker, err)
				}
				return re
			}
		}
		t.Fatalf("docs/scale-to-zero.md has no line starting %q", marker)
		return nil
	}
	return after("# routing only: GET and HEAD"), after("# scale to zero adds: POST")
}

// TestFilteringProxyAllowLists runs the adapter and the scale-to-zero
// actions through a filtering socket proxy with the README's allow-lists
// (issue 18 item 6): with the routing list alone, containers are listed
// and followed, and every write is refused, a wake included; with the
// wake list added, start, stop, pause and unpause work, and any other
// write (create, exec, kill, remove, network connect) is still refused.
func TestFilteringProxyAllowLists(t *testing.T) {
	t.Parallel()
	reads, wakes := readmeAllowLists(t)
	readRule := dockertest.FilterRule{Methods: []string{"GET", "HEAD"}, Path: reads}
	wakeRule := dockertest.FilterRule{Methods: []string{"POST"}, Path: wakes}
	cli := dockertest.Client(t)
	tc := newCase(t)
	labels := tc.labels(catalog.LabelStandbyAfter, "1h")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "filter", Labels: labels})

	// What the lists must refuse, whatever else they allow.
	for _, p := range []string{
		"/v1.41/containers/create", "/v1.41/containers/" + c.ID + "/exec", "/v1.41/containers/" + c.ID + "/kill",
		"/v1.41/containers/" + c.ID + "/restart", "/v1.41/containers/" + c.ID + "/update",
		"/v1.41/containers/../start", "/v1.41/containers/" + c.ID + "/start/../exec",
		"/v1.41/networks/bridge/connect", "/v1.41/images/create", "/v1.41/build",
	} {
		if wakes.MatchString(p) || reads.MatchString(p) {
			t.Errorf("the README's allow-lists allow %s", p)
		}
	}

	for _, withWakes := range []bool{false, true} {
		name := "routing only"
		rules := []dockertest.FilterRule{readRule}
		if withWakes {
			name = "with wakes"
			rules = append(rules, wakeRule)
		}
		t.Run(name, func(t *testing.T) {
			proxy := dockertest.NewFilterProxy(t, rules...)
			sink, _ := start(t, Config{Host: proxy.Host()}, nil)
			sink.WaitFor(t, waitTimeout, "the listing through the proxy", func(v view) bool {
				return v.ByID[c.ID].State == catalog.StateRunning
			})

			a, err := New(Config{Host: proxy.Host()})
			if err != nil {
				t.Fatal(err)
			}
			x := a.Actions()
			defer x.Close()
			if !withWakes {
				if err := x.Pause(ctx(t), c.ID, labels); err == nil {
					t.Fatal("a pause went through the routing-only list")
				}
				// Events still flow: pause it directly.
				if err := cli.ContainerPause(ctx(t), c.ID); err != nil {
					t.Fatal(err)
				}
				sink.WaitFor(t, eventTimeout, "the pause, followed through the proxy", func(v view) bool {
					return v.ByID[c.ID].State == catalog.StatePaused
				})
				if err := cli.ContainerUnpause(ctx(t), c.ID); err != nil {
					t.Fatal(err)
				}
				sink.WaitFor(t, eventTimeout, "the unpause", func(v view) bool { return v.ByID[c.ID].State == catalog.StateRunning })
			} else {
				for _, step := range []struct {
					what  string
					do    func() error
					state catalog.State
				}{
					{"pause", func() error { return x.Pause(ctx(t), c.ID, labels) }, catalog.StatePaused},
					{"unpause", func() error { return x.Unpause(ctx(t), c.ID, labels) }, catalog.StateRunning},
					{"stop", func() error { return x.Stop(ctx(t), c.ID, labels) }, catalog.StateStopped},
					{"start", func() error { return x.Start(ctx(t), c.ID, labels) }, catalog.StateRunning},
				} {
					if err := step.do(); err != nil {
						t.Fatalf("%s through the wake list: %v", step.what, err)
					}
					sink.WaitFor(t, eventTimeout, step.what, func(v view) bool { return v.ByID[c.ID].State == step.state })
				}
			}

			// Every other write is refused.
			pc, err := client.NewClientWithOpts(client.WithHost(proxy.Host()), client.WithAPIVersionNegotiation())
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			writes := map[string]func() error{
				"create": func() error {
					_, err := pc.ContainerCreate(ctx(t), &container.Config{Image: "none"}, nil, nil, nil, dockertest.Name("filter-forbidden"))
					return err
				},
				"exec": func() error {
					_, err := pc.ContainerExecCreate(ctx(t), c.ID, container.ExecOptions{Cmd: []string{"/hello", "-healthcheck"}})
					return err
				},
				"kill":    func() error { return pc.ContainerKill(ctx(t), c.ID, "KILL") },
				"restart": func() error { return pc.ContainerRestart(ctx(t), c.ID, container.StopOptions{}) },
				"remove":  func() error { return pc.ContainerRemove(ctx(t), c.ID, container.RemoveOptions{Force: true}) },
				"network connect": func() error {
					return pc.NetworkConnect(ctx(t), "bridge", c.ID, &network.EndpointSettings{})
				},
			}
			for what, write := range writes {
				err := write()
				if err == nil || !strings.Contains(err.Error(), "filtering proxy") {
					t.Errorf("%s through the proxy: %v, want the proxy's refusal", what, err)
				}
			}
			if in := inspect(t, cli, c.ID); in.State == nil || !in.State.Running {
				t.Error("the container is no longer running after the refused writes")
			}
			t.Logf("refused: %v", proxy.Refused())
		})
	}
}
