//go:build e2e && linux

// Package cluster is the end-to-end test of the Swarm modules on a real
// three-node swarm on one machine: the machine's Docker Engine is the
// manager, and two more Engines (each a dockerd in network, UTS, mount and
// PID namespaces of its own, linked by a veth to a bridge on this host;
// nodes.sh) are workers. Caddy (the static image) runs in a container on
// the manager, on an attachable overlay network, following the manager's
// socket; the services' tasks run on all three nodes. The tests make the
// failures a cluster has (a worker crashed, a worker cut off the network,
// a node drained, a rolling update whose new tasks land elsewhere, the
// Engine Caddy follows restarted) three times each under
// steady load through Caddy, and report what failed and how fast the lost
// tasks left the rotation.
//
// It runs only under `make test-cluster` (which sets CADDY_DICER_CLUSTER=1
// and tears down what a killed run left), as root, and never on an Engine
// that is already in a swarm it did not make.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// Environment.
const (
	// envRun must be 1 for the suite to run (make test-cluster sets it).
	envRun = "CADDY_DICER_CLUSTER"
)

// nodeMarker labels the manager node of the swarm this suite made, so
// that a killed run's swarm is recognised as ours and left by the next.
const nodeMarker = "caddy-dicer-cluster"

// managerAddr is the bridge's address, which the manager advertises.
const managerAddr = "10.213.77.1"

// workers is the number of extra Engines.
const workers = 2

// The run's shared fixture, set before m.Run.
var (
	cli       *client.Client
	network   string                // the attachable overlay network
	helloV1   string                // the test image
	helloV2   string                // the same, another image ID: "a new version"
	caddyAddr string                // 127.0.0.1:port where Caddy's :80 is published
	adminAddr string                // 127.0.0.1:port where Caddy's admin API is published
	caddyName string                // its container
	caddyBin  string                // the static Caddy binary
	nodeIDs   = map[string]string{} // node hostname -> swarm node ID
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() || os.Getenv(envRun) != "1" {
		fmt.Println("e2e/cluster: skipped: a three-node swarm on this machine; run make test-cluster (root, Docker Engine)")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "FATAL: e2e/cluster: needs root (network namespaces, extra dockerd's)")
		os.Exit(1)
	}
	os.Exit(run(m))
}

func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "FATAL: e2e/cluster: "+format+"\n", args...)
	return 1
}

var teardownOnce sync.Once

// teardown removes everything the run made, whatever happened: the
// services, Caddy, the network, the workers' and the manager's swarm
// membership, the extra Engines with their namespaces and data roots.
func teardown() {
	teardownOnce.Do(func() {
		cleanupDocker()
		// A test may have promoted the workers (TestClusterManagerRestart).
		var names []string
		for i := 1; i <= workers; i++ {
			names = append(names, nodeName(i))
		}
		_, _ = docker(30*time.Second, append([]string{"node", "demote"}, names...)...)
		for i := 1; i <= workers; i++ {
			_, _ = nodeDocker(i, 30*time.Second, "swarm", "leave", "--force")
		}
		if ours() {
			if out, err := docker(2*time.Minute, "swarm", "leave", "--force"); err != nil {
				fmt.Fprintf(os.Stderr, "e2e/cluster: docker swarm leave --force: %v\n%s", err, out)
			}
			// swarm init made it; leaving keeps it.
			_, _ = docker(time.Minute, "network", "rm", "docker_gwbridge")
		}
		if out, err := nodes(2*time.Minute, "down"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/cluster: nodes.sh down: %v\n%s", err, out)
		}
		for _, ref := range images {
			_, _ = docker(time.Minute, "image", "rm", "--force", ref)
		}
	})
}

// run makes the fixture, runs the tests and takes everything down (on
// SIGINT and SIGTERM too).
func run(m *testing.M) (code int) {
	var err error
	if cli, err = dockertest.NewClient(); err != nil {
		return fatalf("no Engine client: %v", err)
	}
	defer cli.Close()
	state, err := docker(30*time.Second, "info", "--format", "{{.Swarm.LocalNodeState}}")
	if err != nil {
		return fatalf("docker info: %v\n%s", err, state)
	}
	if s := strings.TrimSpace(state); s != "inactive" {
		if !ours() {
			fmt.Printf("e2e/cluster: SKIPPED: this Engine is in a swarm (%s) that this suite did not make; not touching it\n", s)
			return 0
		}
		fmt.Fprintln(os.Stderr, "e2e/cluster: leaving the swarm a killed run left behind")
		if out, err := docker(2*time.Minute, "swarm", "leave", "--force"); err != nil {
			return fatalf("leaving the stale swarm: %v\n%s", err, out)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			teardown()
			os.Exit(1)
		}
	}()
	defer teardown()

	began := time.Now()
	if err := makeCluster(); err != nil {
		return fatalf("%v", err)
	}
	if err := setup(); err != nil {
		return fatalf("%v", err)
	}
	fmt.Fprintf(os.Stderr, "e2e/cluster: three nodes, images and Caddy ready in %v\n", time.Since(began).Round(time.Second))
	return m.Run()
}

// ours says whether this Engine is the manager of a swarm this suite made.
func ours() bool {
	label, err := docker(30*time.Second, "node", "inspect", "self", "--format", "{{index .Spec.Labels \""+nodeMarker+"\"}}")
	return err == nil && strings.TrimSpace(label) == "1"
}

// makeCluster starts the worker Engines, makes this Engine a swarm
// manager advertising the bridge's address, and joins the workers.
func makeCluster() error {
	if out, err := nodes(3*time.Minute, "up", fmt.Sprint(workers)); err != nil {
		return fmt.Errorf("starting the worker Engines: %v\n%s", err, out)
	}
	if out, err := docker(2*time.Minute, "swarm", "init", "--advertise-addr", managerAddr); err != nil {
		return fmt.Errorf("docker swarm init: %v\n%s", err, out)
	}
	self, err := docker(30*time.Second, "info", "--format", "{{.Swarm.NodeID}}")
	if err != nil {
		return fmt.Errorf("docker info: %v\n%s", err, self)
	}
	if out, err := docker(30*time.Second, "node", "update", "--label-add", nodeMarker+"=1", strings.TrimSpace(self)); err != nil {
		return fmt.Errorf("marking the manager node: %v\n%s", err, out)
	}
	token, err := docker(30*time.Second, "swarm", "join-token", "--quiet", "worker")
	if err != nil {
		return fmt.Errorf("docker swarm join-token: %v\n%s", err, token)
	}
	for i := 1; i <= workers; i++ {
		addr, _ := nodes(10*time.Second, "addr", fmt.Sprint(i))
		if out, err := nodeDocker(i, 2*time.Minute, "swarm", "join", "--token", strings.TrimSpace(token),
			"--advertise-addr", strings.TrimSpace(addr), managerAddr+":2377"); err != nil {
			return fmt.Errorf("node %d joining: %v\n%s", i, err, out)
		}
	}
	out, err := docker(30*time.Second, "node", "ls", "--format", "{{.Hostname}} {{.ID}}")
	if err != nil {
		return fmt.Errorf("docker node ls: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if host, id, ok := strings.Cut(line, " "); ok {
			nodeIDs[host] = id
		}
	}
	if len(nodeIDs) != workers+1 {
		return fmt.Errorf("the swarm has nodes %v, want %d", nodeIDs, workers+1)
	}
	return nil
}

// setup builds the images, copies them to the workers and starts Caddy on
// the overlay network.
func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if helloV1, err = dockertest.BuildImage(ctx, cli); err != nil {
		return err
	}
	if helloV2, err = buildImage("hello-v2", "FROM "+helloV1+"\nLABEL caddy-dicer.test.version=2\n", nil); err != nil {
		return err
	}
	for i := 1; i <= workers; i++ {
		if err := copyImages(i, helloV1, helloV2); err != nil {
			return err
		}
	}
	network = dockertest.Name("cluster")
	if out, err := docker(time.Minute, "network", "create", "--driver", "overlay", "--attachable", network); err != nil {
		return fmt.Errorf("creating the overlay network: %v\n%s", err, out)
	}
	if caddyBin, err = caddyBinary(); err != nil {
		return err
	}
	caddyImage, err := buildImage("caddy", caddyDockerfile, map[string]string{"caddy": caddyBin, "Caddyfile": ""})
	if err != nil {
		return err
	}
	caddyName = dockertest.Name("caddy")
	if out, err := docker(time.Minute, "run", "--detach", "--name", caddyName, "--network", network,
		"--label", "caddy-dicer.test.run="+dockertest.RunID(),
		"--publish", "127.0.0.1::80", "--publish", "127.0.0.1::2019",
		"--volume", "/var/run/docker.sock:/var/run/docker.sock",
		caddyImage); err != nil {
		return fmt.Errorf("starting Caddy: %v\n%s", err, out)
	}
	if caddyAddr, err = published(caddyName, "80/tcp"); err != nil {
		return err
	}
	if adminAddr, err = published(caddyName, "2019/tcp"); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _, err := get(context.Background(), "nobody.test")
		if err == nil && status == 503 {
			return nil
		}
		if time.Now().After(deadline) {
			logs, _ := docker(30*time.Second, "logs", "--tail", "50", caddyName)
			return fmt.Errorf("Caddy does not answer at %s (last: %d, %v); its log:\n%s", caddyAddr, status, err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// copyImages moves images to worker i: docker save | docker load, no
// registry.
func copyImages(i int, refs ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	save := exec.CommandContext(ctx, "docker", append([]string{"save"}, refs...)...)
	load := exec.CommandContext(ctx, "docker", "-H", nodeHost(i), "load", "--quiet")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	load.Stdin = pipe
	var out bytes.Buffer
	save.Stderr, load.Stdout, load.Stderr = &out, &out, &out
	if err := save.Start(); err != nil {
		return err
	}
	if err := load.Run(); err != nil {
		_ = save.Wait()
		return fmt.Errorf("loading %v on node %d: %v\n%s", refs, i, err, out.String())
	}
	if err := save.Wait(); err != nil {
		return fmt.Errorf("docker save %v: %v\n%s", refs, err, out.String())
	}
	return nil
}

// caddyDockerfile is Caddy from nothing but its static binary and the
// Caddyfile below: no base image, nothing pulled.
const caddyDockerfile = `FROM scratch
COPY caddy /usr/bin/caddy
COPY Caddyfile /etc/caddy/Caddyfile
ENV HOME=/data XDG_CONFIG_HOME=/config XDG_DATA_HOME=/data
ENTRYPOINT ["/usr/bin/caddy"]
CMD ["run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
`

// adminHost is the Host header the admin API accepts (its only origin).
const adminHost = "caddy-admin"

// caddyfile routes every host to the services whose caddy.host lists it,
// with the settings docs/cluster.md gives for a swarm of several nodes
// (R11t): a short dial timeout, a task out of the rotation at its first
// failed connection for fail_duration, and retries on the other tasks.
// The admin API listens on the container's network for the tests, which
// read reverse_proxy's view of the upstreams (/reverse_proxy/upstreams).
const caddyfile = `{
	admin :2019 {
		origins ` + adminHost + `
	}
	log {
		level INFO
	}
}

:80 {
	reverse_proxy {
		dynamic swarm
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 50ms
		fail_duration 2s
		max_fails 1
		transport http {
			dial_timeout 300ms
			response_header_timeout 2s
		}
	}
}
`

// buildImage builds an image (see dockertest.BuildImageFromFiles) from
// dockerfile and files (name -> path to copy; "Caddyfile" with "" is the
// caddyfile above), and records it for the teardown.
func buildImage(name, dockerfile string, files map[string]string) (string, error) {
	ref, err := dockertest.BuildImageFromFiles(name, dockerfile, files, caddyfile)
	if err == nil {
		images = append(images, ref)
	}
	return ref, err
}

// images are the images this run built (the test image excepted, which
// dockertest keeps for reuse).
var images []string

// caddyBinary is the static Caddy of this checkout (dockertest.StaticCaddy).
func caddyBinary() (string, error) { return dockertest.StaticCaddy("../..", "e2e/cluster") }

// cleanupDocker removes the services, Caddy's container and the network.
func cleanupDocker() {
	if out, err := docker(time.Minute, "service", "ls", "--quiet", "--filter", "label=caddy-dicer.test.run="+dockertest.RunID()); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = docker(time.Minute, append([]string{"service", "rm"}, ids...)...)
		}
	}
	if caddyName != "" {
		_, _ = docker(time.Minute, "rm", "--force", caddyName)
	}
	// Any other container a test started on this Engine (a second Caddy).
	if out, err := docker(time.Minute, "ps", "--all", "--quiet", "--filter", "label=caddy-dicer.test.run="+dockertest.RunID()); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = docker(time.Minute, append([]string{"rm", "--force"}, ids...)...)
		}
	}
	if network != "" {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := docker(time.Minute, "network", "rm", network); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// docker runs the docker CLI against this machine's Engine.
func docker(timeout time.Duration, args ...string) (string, error) {
	return dockertest.Docker(timeout, args...)
}

// nodeHost is worker i's Engine endpoint.
func nodeHost(i int) string { return fmt.Sprintf("unix:///run/cdt-cluster/n%d/docker.sock", i) }

// nodeName is worker i's hostname (and swarm node name).
func nodeName(i int) string { return fmt.Sprintf("cdt-n%d", i) }

// nodeDocker runs the docker CLI against worker i's Engine.
func nodeDocker(i int, timeout time.Duration, args ...string) (string, error) {
	return command(timeout, "docker", append([]string{"-H", nodeHost(i)}, args...)...)
}

// nodes runs nodes.sh.
func nodes(timeout time.Duration, args ...string) (string, error) {
	return command(timeout, "./nodes.sh", args...)
}

func command(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return string(out), err
}

// published returns the 127.0.0.1:port where container publishes port.
func published(container, port string) (string, error) { return dockertest.Published(container, port) }
