// Package dockertest holds helpers for tests that run against the real
// Docker Engine of the machine: a tiny test image built from this
// repository's own helloserver (no registry is needed), containers and
// networks labelled with a per-process run ID and removed at the end, and a
// socket proxy that can cut the Engine's connections.
//
// The project requires the Engine for its tests: Client fails the test,
// with a message saying so, when the Engine cannot be reached. Only under
// -short (the hermetic run) does it skip the test instead.
//
// Networking rule for tests: HTTP traffic goes only to loopback
// (127.0.0.0/8) or to the addresses of containers the test itself created.
// Get and Post enforce the loopback part.
package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// RunLabel is the label every container and network a test creates
// carries, with RunID as its value.
const RunLabel = "caddy-dicer.test.run"

// DefaultEngineHost is where the Engine is reached when DOCKER_HOST is not
// set.
const DefaultEngineHost = "unix:///var/run/docker.sock"

// opTimeout bounds each Engine call the helpers make.
const opTimeout = 30 * time.Second

var runID = sync.OnceValue(func() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
})

// RunID identifies this test process: every container and network the
// helpers create carries the label RunLabel=RunID(), and Cleanup removes
// them all.
func RunID() string { return runID() }

// Name is the name the helpers give a container or network called name:
// prefixed with the run ID, so that concurrent test processes sharing the
// Engine never collide.
func Name(name string) string { return "cdt-" + RunID() + "-" + name }

// EngineHost is the Engine endpoint the helpers use: $DOCKER_HOST, else
// DefaultEngineHost.
func EngineHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return DefaultEngineHost
}

// NewClient returns a client of the Engine at EngineHost, negotiating the
// API version (the Engine may be older than the library).
func NewClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.WithHost(EngineHost()), client.WithAPIVersionNegotiation())
}

// Client returns a client of the Engine, closed when the test ends. The test
// fails at once, saying why, when the Engine cannot be reached: the project
// requires it. Under -short (the hermetic run) the test is skipped instead.
func Client(t testing.TB) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Docker Engine: run without -short (make test)")
	}
	cli, err := NewClient()
	if err != nil {
		t.Fatalf("dockertest: these tests require the Docker Engine, and no client can be made for %s: %v", EngineHost(), err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("dockertest: these tests require the Docker Engine, which cannot be reached at %s (check `docker info`): %v", EngineHost(), err)
	}
	return cli
}

// used is set once a helper created something on the Engine.
var used atomic.Bool

// Main runs the tests of a package that uses the Engine and then removes
// every container and network of this run, whatever the outcome (if the
// run created any: running only unit tests needs no Engine):
//
//	func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if !used.Load() {
		return code
	}
	cli, err := NewClient()
	if err != nil {
		return code
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Cleanup(ctx, cli); err != nil {
		fmt.Fprintln(os.Stderr, "dockertest: cleanup:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Cleanup force-removes every container, then every network, labelled with
// this process's run ID.
func Cleanup(ctx context.Context, cli client.APIClient) error {
	f := filters.NewArgs(filters.Arg("label", RunLabel+"="+RunID()))
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("listing the run's containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		if err := removeContainer(ctx, cli, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing the run's networks: %w", err))...)
	}
	for _, n := range nets {
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("removing network %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

func removeContainer(ctx context.Context, cli client.APIClient, id string) error {
	err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) && !strings.Contains(err.Error(), "is already in progress") {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	return nil
}

// Options describe a test container.
type Options struct {
	// Name is required; the container is named Name(Name), and its
	// helloserver answers "hello from <Name>" unless Env sets NAME.
	Name string
	// Labels are the container's labels; RunLabel is added.
	Labels map[string]string
	// Env is added to the container's environment (NAME, PORT, HEALTH).
	Env []string
	// Health is the container's health check; nil for none. HealthCheck
	// gives the usual one.
	Health *container.HealthConfig
	// Ports are published ports in `docker run -p` syntax:
	// "127.0.0.1::8080" (a random loopback port), "0.0.0.0:18080:8080/tcp".
	Ports []string
	// Network is the network the container is created on; "" is the
	// Engine's default bridge.
	Network string
	// Networks are further networks the container is connected to before
	// it starts.
	Networks []string
	// NoStart leaves the container created but not started.
	NoStart bool
	// StopTimeout is the container's stop timeout in seconds; nil: the
	// Engine's default.
	StopTimeout *int
	// Image is the container's image; "" is the hello test image
	// (BuildImage). RealAppsImage gives the real-app image.
	Image string
	// Cmd replaces the image's command, e.g. RealAppWebSocket; nil keeps it.
	Cmd []string
	// StopSignal replaces the image's stop signal, e.g. "SIGTERM"; "" keeps
	// it.
	StopSignal string
}

// HealthCheck is a health check running the helloserver's -healthcheck
// every interval, with one retry, so that a verdict changes within about
// two intervals. A non-zero startPeriod keeps failures from counting (the
// status stays "starting") until the first success or the period's end.
func HealthCheck(interval, startPeriod time.Duration) *container.HealthConfig {
	return &container.HealthConfig{
		Test:        []string{"CMD", "/hello", "-healthcheck"},
		Interval:    interval,
		Timeout:     5 * time.Second,
		Retries:     1,
		StartPeriod: startPeriod,
	}
}

// Container is a test container.
type Container struct {
	ID   string
	Name string // as the Engine knows it, without the leading "/"
}

// Start creates (and unless opts.NoStart, starts) a container from the test
// image, and registers its removal when the test ends, pass or fail.
func Start(t testing.TB, cli client.APIClient, opts Options) Container {
	t.Helper()
	c, err := StartContainer(context.Background(), cli, opts)
	if c.ID != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := removeContainer(ctx, cli, c.ID); err != nil {
				t.Errorf("dockertest: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("dockertest: %v", err)
	}
	return c
}

// StartContainer is Start without a testing.TB: the caller removes the
// container (Cleanup removes it at the latest). On an error after the
// container was created, the returned Container has its ID.
func StartContainer(ctx context.Context, cli client.APIClient, opts Options) (Container, error) {
	if opts.Name == "" {
		return Container{}, errors.New("Options.Name is required")
	}
	image := opts.Image
	if image == "" {
		var err error
		if image, err = BuildImage(ctx, cli); err != nil {
			return Container{}, err
		}
	}
	exposed, bindings, err := nat.ParsePortSpecs(opts.Ports)
	if err != nil {
		return Container{}, fmt.Errorf("ports %q: %w", opts.Ports, err)
	}
	labels := map[string]string{RunLabel: RunID()}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	env := append([]string{"NAME=" + opts.Name}, opts.Env...)
	health := opts.Health
	if health != nil && health.StartPeriod > 0 && health.StartInterval == 0 {
		// The client's version is its default until it has negotiated.
		cli.NegotiateAPIVersion(ctx)
	}
	if health != nil && health.StartPeriod > 0 && health.StartInterval == 0 && versions.GreaterThanOrEqualTo(cli.ClientVersion(), "1.44") {
		// Engines from API 1.44 (Docker 25) check every StartInterval, 5 s
		// by default, during the start period, where 20.10 checks every
		// Interval: the same pace on both.
		h := *health
		h.StartInterval = h.Interval
		health = &h
	}
	cfg := &container.Config{
		Image:        image,
		Labels:       labels,
		Env:          env,
		Healthcheck:  health,
		ExposedPorts: exposed,
		StopTimeout:  opts.StopTimeout,
		Cmd:          opts.Cmd,
		StopSignal:   opts.StopSignal,
	}
	hostCfg := &container.HostConfig{
		PortBindings: bindings,
		NetworkMode:  container.NetworkMode(opts.Network),
	}
	name := Name(opts.Name)
	used.Store(true)
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := cli.ContainerCreate(cctx, cfg, hostCfg, nil, nil, name)
	if err != nil {
		return Container{}, fmt.Errorf("creating container %s: %w", name, err)
	}
	c := Container{ID: resp.ID, Name: name}
	for _, n := range opts.Networks {
		if err := cli.NetworkConnect(cctx, n, c.ID, nil); err != nil {
			return c, fmt.Errorf("connecting container %s to network %s: %w", name, n, err)
		}
	}
	if !opts.NoStart {
		if err := cli.ContainerStart(cctx, c.ID, container.StartOptions{}); err != nil {
			return c, fmt.Errorf("starting container %s: %w", name, err)
		}
	}
	return c, nil
}

// CreateNetwork creates a bridge network named Name(name), labelled with
// the run ID, removed when the test ends (after the containers started
// later, since cleanups run last-in first-out). It returns the network's
// full name.
func CreateNetwork(t testing.TB, cli client.APIClient, name string) string {
	t.Helper()
	full := Name(name)
	used.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := cli.NetworkCreate(ctx, full, network.CreateOptions{
		Driver: "bridge",
		Labels: map[string]string{RunLabel: RunID()},
	})
	if err != nil {
		t.Fatalf("dockertest: creating network %s: %v", full, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := cli.NetworkRemove(ctx, resp.ID); err != nil && !isNotFound(err) {
			t.Errorf("dockertest: removing network %s: %v", full, err)
		}
	})
	return full
}

// PublishedAddr returns the loopback address ("127.0.0.1:port") at which
// the running container c's port (such as "8080/tcp") is published, on
// 127.0.0.1 or on every address.
func PublishedAddr(t testing.TB, cli client.APIClient, c Container, port string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatalf("dockertest: inspecting %s: %v", c.Name, err)
	}
	if in.NetworkSettings != nil {
		for _, b := range in.NetworkSettings.Ports[nat.Port(port)] {
			switch b.HostIP {
			case "127.0.0.1", "0.0.0.0", "":
				return net.JoinHostPort("127.0.0.1", b.HostPort)
			}
		}
	}
	t.Fatalf("dockertest: %s publishes %s on no loopback or every-address binding", c.Name, port)
	return ""
}

// Get sends a GET to http://addr+path, where addr must be a loopback
// address, and returns the status and body.
func Get(ctx context.Context, addr, path string) (int, string, error) {
	return do(ctx, http.MethodGet, addr, path)
}

// Post sends an empty POST to http://addr+path, where addr must be a
// loopback address, and returns the status and body.
func Post(ctx context.Context, addr, path string) (int, string, error) {
	return do(ctx, http.MethodPost, addr, path)
}

func do(ctx context.Context, method, addr, path string) (int, string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, "", err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.Is4() || !ip.IsLoopback() {
		return 0, "", fmt.Errorf("dockertest: %s is not an IPv4 loopback address: tests send HTTP only to loopback or to their own containers", addr)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// MainE2E is the TestMain of an end-to-end package pkg ("e2e/fleet") whose
// tests need the Engine's client and a Caddy built from this checkout,
// nothing more: under -short it skips the package, else it runs
// MainWithCaddy, which sets *cli and *caddyBin before m.Run.
func MainE2E(m *testing.M, pkg string, cli **client.Client, caddyBin *string) int {
	flag.Parse()
	if testing.Short() {
		fmt.Printf("%s: skipped under -short: needs the Docker Engine and the network to build Caddy; run make test-e2e\n", pkg)
		return 0
	}
	return MainWithCaddy(m, pkg, func(c *client.Client, bin string) (func(), error) {
		*cli, *caddyBin = c, bin
		return nil, nil
	})
}

// MainWithCaddy runs the end-to-end tests of the package pkg ("e2e/fleet",
// two folders below the module's root) against the Engine and a Caddy
// built from this checkout (testkit.BuildCaddy): start gets the Engine's
// client and the Caddy binary before m.Run and returns what to undo
// after it (nil: nothing); every container and network of the run is
// removed then (Main). Any error is fatal: the run fails with it.
func MainWithCaddy(m *testing.M, pkg string, start func(cli *client.Client, caddyBin string) (stop func(), err error)) int {
	fatal := func(err error) int {
		fmt.Fprintf(os.Stderr, "FATAL: %s: %v\n", pkg, err)
		return 1
	}
	cli, err := NewClient()
	if err != nil {
		return fatal(fmt.Errorf("no Engine client: %w", err))
	}
	defer cli.Close()
	dir, err := os.MkdirTemp("", "caddy-dicer-build")
	if err != nil {
		return fatal(err)
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs("../..")
	if err != nil {
		return fatal(err)
	}
	bin, err := testkit.BuildCaddy(root, dir)
	if err != nil {
		return fatal(err)
	}
	stop, err := start(cli, bin)
	if err != nil {
		return fatal(err)
	}
	if stop != nil {
		defer stop()
	}
	used.Store(true) // Main removes what the run made, even if no test started a container through Start
	return Main(m)
}
