//go:build e2e && linux

// Package swarm is the end-to-end test of the Swarm modules: a single-node
// swarm that the test makes on the machine's Docker Engine and leaves
// afterwards, an attachable overlay network, Caddy (built static with
// xcaddy) in a container of a FROM scratch image on that network, and
// services of the test image. Requests go from the test to a port Caddy's
// container publishes on 127.0.0.1 (overlay addresses are not reachable
// from the host).
package swarm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// nodeMarker labels the swarm node this test made, so that a run killed
// before it could leave is recognised, and its swarm left, by the next.
const nodeMarker = "caddy-dicer-e2e"

// The run's shared fixture, set before m.Run.
var (
	cli       *client.Client
	network   string // the attachable overlay network
	helloV1   string // the test image
	helloV2   string // the same, another image ID: "a new version"
	helloHC   string // the same with a health check (exec form: no shell in it)
	caddyAddr string // 127.0.0.1:port where Caddy's :80 is published
	tlsAddr   string // 127.0.0.1:port where Caddy's :443 is published
	vipAddr   string // 127.0.0.1:port where Caddy's :81 (endpoint vip) is published
	l4Addr    string // 127.0.0.1:port where Caddy's :82 (layer4, dicer_proxy swarm) is published
	caddyName string // its container
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/swarm: skipped under -short: needs the Docker Engine, swarm mode and the network to build Caddy; run make test-e2e")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "FATAL: e2e/swarm: "+format+"\n", args...)
	return 1
}

// run makes the fixture, runs the tests and takes everything down, the
// swarm last, whatever happened (on SIGINT and SIGTERM too).
func run(m *testing.M) (code int) {
	var err error
	if cli, err = dockertest.NewClient(); err != nil {
		return fatalf("no Engine client: %v", err)
	}
	defer cli.Close()
	if err := initSwarm(); err != nil {
		return fatalf("%v", err)
	}
	leave := func() {
		if out, err := docker(2*time.Minute, "swarm", "leave", "--force"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/swarm: docker swarm leave --force: %v\n%s", err, out)
			code = 1
		}
	}
	defer leave()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			cleanupAll()
			leave()
			os.Exit(1)
		}
	}()
	defer cleanupAll()

	if err := setup(); err != nil {
		return fatalf("%v", err)
	}
	return m.Run()
}

// initSwarm makes this Engine a single-node swarm manager. A swarm that
// this test did not make is not ours to leave: the run stops.
func initSwarm() error {
	state, err := docker(30*time.Second, "info", "--format", "{{.Swarm.LocalNodeState}}")
	if err != nil {
		return fmt.Errorf("docker info: %v\n%s", err, state)
	}
	if strings.TrimSpace(state) == "active" {
		labels, _ := docker(30*time.Second, "node", "inspect", "self", "--format", "{{index .Spec.Labels \""+nodeMarker+"\"}}")
		if strings.TrimSpace(labels) != "1" {
			return errors.New("this Engine is already in a swarm that this test did not make; not touching it")
		}
		fmt.Fprintln(os.Stderr, "e2e/swarm: leaving the swarm a killed run left behind")
		if out, err := docker(2*time.Minute, "swarm", "leave", "--force"); err != nil {
			return fmt.Errorf("leaving the stale swarm: %v\n%s", err, out)
		}
	}
	if out, err := docker(2*time.Minute, "swarm", "init", "--advertise-addr", "127.0.0.1"); err != nil {
		return fmt.Errorf("docker swarm init: %v\n%s", err, out)
	}
	node, err := docker(30*time.Second, "info", "--format", "{{.Swarm.NodeID}}")
	if err == nil {
		var out string
		if out, err = docker(30*time.Second, "node", "update", "--label-add", nodeMarker+"=1", strings.TrimSpace(node)); err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
	}
	if err != nil {
		_, _ = docker(2*time.Minute, "swarm", "leave", "--force")
		return fmt.Errorf("marking the node: %v", err)
	}
	return nil
}

// setup builds the images and starts Caddy on the overlay network.
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
	if helloHC, err = buildImage("hello-hc", "FROM "+helloV1+"\nHEALTHCHECK --interval=1s --timeout=2s --retries=1 CMD [\"/hello\", \"-healthcheck\"]\n", nil); err != nil {
		return err
	}
	network = dockertest.Name("swarm")
	if out, err := docker(time.Minute, "network", "create", "--driver", "overlay", "--attachable", network); err != nil {
		return fmt.Errorf("creating the overlay network: %v\n%s", err, out)
	}
	bin, err := caddyBinary()
	if err != nil {
		return err
	}
	caddyImage, err := buildImage("caddy", caddyDockerfile, map[string]string{"caddy": bin, "Caddyfile": ""})
	if err != nil {
		return err
	}
	caddyName = dockertest.Name("caddy")
	if out, err := docker(time.Minute, "run", "--detach", "--name", caddyName, "--network", network,
		"--label", "caddy-dicer.test.run="+dockertest.RunID(),
		"--publish", "127.0.0.1::80", "--publish", "127.0.0.1::81", "--publish", "127.0.0.1::443", "--publish", "127.0.0.1::82",
		"--volume", "/var/run/docker.sock:/var/run/docker.sock",
		caddyImage); err != nil {
		return fmt.Errorf("starting Caddy: %v\n%s", err, out)
	}
	if caddyAddr, err = published(caddyName, "80/tcp"); err != nil {
		return err
	}
	if tlsAddr, err = published(caddyName, "443/tcp"); err != nil {
		return err
	}
	if vipAddr, err = published(caddyName, "81/tcp"); err != nil {
		return err
	}
	if l4Addr, err = published(caddyName, "82/tcp"); err != nil {
		return err
	}
	// Caddy answers once it runs: a host no service claims gets 503.
	var status int
	if testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		status, _, err = get(context.Background(), "nobody.test")
		return err == nil && status == 503
	}) {
		return nil
	}
	logs, _ := docker(30*time.Second, "logs", "--tail", "50", caddyName)
	return fmt.Errorf("Caddy does not answer at %s (last: %d, %v); its log:\n%s", caddyAddr, status, err, logs)
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

// caddyfile routes every host to the services whose caddy.host lists it,
// over plain HTTP (on :81 to their virtual IPs), and over HTTPS with on-demand certificates from Caddy's
// internal CA that the swarm permission allows. The retry settings are
// the README's for zero-downtime deploys. weightedHost is routed with
// lb_policy dicer_weighted (R4c), stickyHost with lb_policy dicer_sticky
// (R4d), *.foreign.swarm.test reads caddy-docker-proxy's and Traefik's
// labels (R2f), metricsHost serves Caddy's metrics, and TCP connections to :82 go to the
// tasks of the services labelled l4=swarm (dicer_proxy, R14).
const caddyfile = `{
	local_certs
	auto_https disable_redirects
	skip_install_trust
	on_demand_tls {
		permission swarm
	}
	log {
		level DEBUG
	}
	layer4 {
		:82 {
			route {
				dicer_proxy swarm l4=swarm 8080
			}
		}
	}
}

http://metrics.swarm.test {
	metrics
}

http://*.foreign.swarm.test {
	reverse_proxy {
		dynamic swarm {
			labels caddy-dicer caddy-docker-proxy traefik
		}
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}

http://weighted.swarm.test {
	reverse_proxy {
		dynamic swarm
		lb_policy dicer_weighted
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}

http://sticky.swarm.test {
	reverse_proxy {
		dynamic swarm
		lb_policy dicer_sticky
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}

:80 {
	reverse_proxy {
		dynamic swarm
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}

:81 {
	reverse_proxy {
		dynamic swarm {
			endpoint vip
		}
		lb_try_duration 5s
		lb_try_interval 50ms
	}
}

https:// {
	tls {
		on_demand
	}
	respond "tls ok"
}
`

// buildImage builds an image (see dockertest.BuildImageFromFiles) from
// dockerfile and files (name -> path to copy; "Caddyfile" with "" is the
// caddyfile above), and records it for cleanupAll.
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
func caddyBinary() (string, error) { return dockertest.StaticCaddy("../..", "e2e/swarm") }

// cleanupAll removes what the run made, Caddy's container and the
// services first, then the network and the images.
func cleanupAll() {
	if out, err := docker(time.Minute, "service", "ls", "--quiet", "--filter", "label=caddy-dicer.test.run="+dockertest.RunID()); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = docker(time.Minute, append([]string{"service", "rm"}, ids...)...)
		}
	}
	if caddyName != "" {
		_, _ = docker(time.Minute, "rm", "--force", caddyName)
	}
	if network != "" {
		// The services' tasks leave the network a moment after their removal.
		testkit.UntilEvery(30*time.Second, 250*time.Millisecond, func() bool {
			_, err := docker(time.Minute, "network", "rm", network)
			return err == nil
		})
	}
	for _, ref := range images {
		_, _ = docker(time.Minute, "image", "rm", "--force", ref)
	}
}

// docker runs the docker CLI and returns its combined output.
func docker(timeout time.Duration, args ...string) (string, error) {
	return dockertest.Docker(timeout, args...)
}

// published returns the 127.0.0.1:port where container publishes port.
func published(container, port string) (string, error) { return dockertest.Published(container, port) }
