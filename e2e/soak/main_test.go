//go:build soak && linux

package soak

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// The binaries the soak runs: `make soak` builds them (make build) and
// passes their paths; a run by hand defaults to the checkout's bin/.
var caddyBin, testdBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/soak: skipped under -short: run make soak or make soak-short (root)")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "FATAL: e2e/soak needs root (BIND's network namespace, the Docker Engine)")
		os.Exit(1)
	}
	var err error
	if caddyBin, err = binary("CADDY_DICER_SOAK_CADDY", "caddy"); err == nil {
		testdBin, err = binary("CADDY_DICER_SOAK_TESTD", "dicer-testd")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "FATAL: e2e/soak:", err)
		os.Exit(1)
	}
	// Main removes every container of this run at the end, pass or fail;
	// a signal is handled by the test's own reaper (takeOverSignals).
	os.Exit(dockertest.Main(m))
}

// binary is the path in env, else bin/<name> of the checkout; it must
// exist.
func binary(env, name string) (string, error) {
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join("..", "..", "bin", name)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s: %w (run make build, or set %s)", p, err, env)
	}
	return p, nil
}

// plan is how much of the month one run compresses: SOAK_SCALE (default
// 1: the full soak; make soak-short sets 0.1) scales the counts and the
// outage.
type plan struct {
	scale float64
	// deploys of a test-daemon instance, each with a runtime weight set
	// on it; restarts of a Caddy with a fresh data directory.
	deploys, restarts int
	// window is how many of the deployed instances live at once; workers
	// how many deploy at once.
	window, workers int
	// outage is how long the storage is away, once, halfway.
	outage time.Duration
	// relabelEvery is how often each tenant is redeployed under another
	// of its hosts (DNS records and certificates follow);
	// engineEvery how often a heal cycle and a wake happen on the Engine.
	relabelEvery, engineEvery time.Duration
	// least is the shortest the deploys may take: they are paced to
	// last that long (0: as fast as they go). warmup is the earliest the
	// first sample is taken, at the first tenth of the deploys or then,
	// whichever is later: the state's own time constants (a gone
	// instance's weight pruned after 10 s, a lease from the future gone a
	// lease time after a sweep first saw it, sweeps a second apart while
	// they find garbage) are fixed, so a soak shorter than a few of them
	// samples its first tenth before anything could have been removed.
	least, warmup time.Duration
	// budget bounds the soak's time: past it the end is sampled where
	// the deploys are, and the soak fails saying so (a test that runs
	// into go test's -timeout panics, and leaves its processes, BIND's
	// namespace and containers behind).
	budget time.Duration
}

func planFromEnv(t *testing.T) plan {
	scale := 1.0
	if s := os.Getenv("SOAK_SCALE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 || v > 10 {
			t.Fatalf("SOAK_SCALE=%q: want a number in (0, 10]", s)
		}
		scale = v
	}
	return plan{
		scale:        scale,
		deploys:      max(200, int(math.Round(10000*scale))),
		restarts:     max(6, int(math.Round(100*scale))),
		window:       40,
		workers:      4,
		outage:       max(5*time.Second, time.Duration(float64(30*time.Second)*scale)),
		relabelEvery: 3 * time.Second,
		engineEvery:  max(8*time.Second, time.Duration(float64(20*time.Second)*scale)),
		budget:       max(4*time.Minute, time.Duration(float64(12*time.Minute)*scale)),
		least:        max(75*time.Second, time.Duration(float64(8*time.Minute)*scale)),
		warmup:       30 * time.Second,
	}
}

// reaper ends what the soak started when the test process gets SIGINT or
// SIGTERM: t.Cleanup does not run then. Each start registers an undo;
// the undos run in reverse order, then the process exits 1.
type reaper struct {
	mu    sync.Mutex
	undos []func()
}

func (r *reaper) add(undo func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.undos = append(r.undos, undo)
}

func (r *reaper) run() {
	r.mu.Lock()
	undos := r.undos
	r.undos = nil
	r.mu.Unlock()
	for i := len(undos) - 1; i >= 0; i-- {
		undos[i]()
	}
}

// takeOverSignals makes r the one handler of SIGINT and SIGTERM until t
// ends. testkit.StartBIND installs a handler that removes its namespace
// and exits at once, before the soak's Caddys, daemon and containers are
// gone: it is reset here, and r removes BIND's namespace itself (bindUndo).
func takeOverSignals(t *testing.T, r *reaper) {
	signal.Reset(syscall.SIGINT, syscall.SIGTERM)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan struct{})
	t.Cleanup(func() { signal.Stop(sig); close(stop) })
	go func() {
		select {
		case s := <-sig:
			fmt.Fprintf(os.Stderr, "e2e/soak: %v: ending what the soak started\n", s)
			r.run()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if cli, err := dockertest.NewClient(); err == nil {
				_ = dockertest.Cleanup(ctx, cli)
			}
			os.Exit(1)
		case <-stop:
		}
	}()
}

// bindUndo ends the named of testkit.StartBIND(t, subnet, ...) and
// removes its namespace and veth, by the names StartBIND gives them (the
// namespace is checked to exist right after the start, so that a change
// of those names fails the soak instead of leaking).
func bindNamespace(subnet int) (ns, hostIf string) {
	pid := os.Getpid() % 100_000
	return fmt.Sprintf("cddns-%d-%d", pid, subnet), fmt.Sprintf("cdd%d.%dh", pid, subnet)
}

func bindUndo(subnet int) func() {
	ns, hostIf := bindNamespace(subnet)
	return func() {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = exec.Command("ip", "netns", "del", ns).Run()
		_ = exec.Command("ip", "link", "del", hostIf).Run()
	}
}

func bindNamespaceExists(subnet int) bool {
	ns, _ := bindNamespace(subnet)
	_, err := os.Stat(filepath.Join("/var/run/netns", ns))
	return err == nil
}
