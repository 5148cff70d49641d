//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// The test binary runs in one of four modes, chosen by its environment:
//
//   - outer (default): build Caddy with xcaddy, create a network namespace,
//     re-run this binary inside it (inner mode) with the same flags, then
//     delete the namespace;
//   - inner: run the scenarios against the simulated Dicer host, inside the
//     namespace;
//   - real Dicer (DICER_ADDRESS and DICER_TOKEN set): build Caddy and run
//     the scenarios against that daemon, without a namespace;
//   - hello: be an instance's process, serving "hello from <name>".
const (
	envNetns     = "CADDY_DICER_E2E_NETNS"      // set in inner mode: the namespace's name
	envCaddy     = "CADDY_DICER_E2E_CADDY"      // the Caddy binary; set by the outer mode, or by hand to skip the build
	envHelloName = "CADDY_DICER_E2E_HELLO_NAME" // hello mode: the instance's name
	envHelloAddr = "CADDY_DICER_E2E_HELLO_ADDR" // hello mode: ip:port to serve on
)

// caddyBin is the Caddy binary under test (set before m.Run).
var caddyBin string

// newHost returns the Dicer host a scenario drives: the simulator or a real
// daemon (set before m.Run).
var newHost func(t *testing.T) dicerHost

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(envHelloName) != "":
		os.Exit(helloMain())
	case os.Getenv(envNetns) != "":
		os.Exit(innerMain(m))
	case short():
		fmt.Println("e2e: skipped under -short: needs root (a network namespace) or a real Dicer daemon, " +
			"and the network to build Caddy with xcaddy; run make test-e2e")
		os.Exit(0)
	case realDicer():
		os.Exit(realMain(m))
	default:
		os.Exit(outerMain())
	}
}

// short reports whether the tests run with -short (the hermetic run).
func short() bool {
	flag.Parse()
	return testing.Short()
}

// fatalf reports a setup failure loudly, for modes that run before or
// around the tests.
func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FATAL: e2e: "+format+"\n", args...)
}

// outerMain builds Caddy (it needs the module proxy, so it runs before the
// namespace exists), then runs the tests in a namespace of their own and
// returns their exit code. The namespace and every process in it are gone
// when it returns.
func outerMain() int {
	if os.Geteuid() != 0 {
		fatalf("the simulated Dicer host runs in a network namespace, which needs root (ip netns).\n" +
			"Run as root, or set DICER_ADDRESS and DICER_TOKEN to test against a real Dicer daemon.")
		return 1
	}
	removeStale()
	defer relaySignals()()
	bin, cleanup, err := caddyBinary()
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer cleanup()

	ns := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	if err := createNamespace(ns); err != nil {
		deleteNamespace(ns)
		fatalf("creating the network namespace: %v", err)
		return 1
	}
	defer deleteNamespace(ns)
	return runInNamespace(ns, bin)
}

// runInNamespace re-runs this test binary inside ns with the same
// arguments (the -test.* flags), streaming its output, and returns its exit
// code. Signals to this process are passed on.
func runInNamespace(ns, bin string) int {
	exe, err := os.Executable() // not /proc/self/exe: ip would resolve that to itself
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	// Everything the tests write goes under tmp, removed here even if they
	// are killed before their own cleanups run.
	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tmpPrefix, os.Getpid()))
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, exe}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envNetns+"="+ns, envCaddy+"="+bin, "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startRelaying(cmd, false); err != nil {
		fatalf("running the tests in namespace %s: %v", ns, err)
		return 1
	}
	err = cmd.Wait()
	stopRelaying()
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		return code
	}
	fatalf("tests in namespace %s: %v", ns, err)
	return 1
}

// The outer process passes the signals it gets (Ctrl-C, go test's
// timeout) on to the child it runs at the time, the build or the tests, so
// that each can clean up; then it cleans up itself.
var (
	relayMu  sync.Mutex
	relayTo  *exec.Cmd
	relayGrp bool // signal relayTo's whole process group
	relayed  bool // a signal came while no child ran
)

// startRelaying starts cmd and relays signals to it (to its process group
// if group, which cmd then leads) until stopRelaying.
func startRelaying(cmd *exec.Cmd, group bool) error {
	relayMu.Lock()
	defer relayMu.Unlock()
	if group {
		cmd.SysProcAttr.Setpgid = true
	}
	if relayed {
		return errors.New("interrupted")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	relayTo, relayGrp = cmd, group
	return nil
}

func stopRelaying() {
	relayMu.Lock()
	defer relayMu.Unlock()
	relayTo = nil
}

// relaySignals relays the signals that end a run until the returned
// function is called.
func relaySignals() (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				relaySignal(s)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

func relaySignal(s os.Signal) {
	relayMu.Lock()
	defer relayMu.Unlock()
	switch {
	case relayTo == nil:
		relayed = true
	case relayGrp:
		_ = syscall.Kill(-relayTo.Process.Pid, s.(syscall.Signal))
	default:
		_ = relayTo.Process.Signal(s)
	}
}

// innerMain runs the scenarios against the simulator, after checking that
// this process really is in the isolated namespace.
func innerMain(m *testing.M) int {
	caddyBin = os.Getenv(envCaddy)
	if err := checkNamespace(); err != nil {
		fatalf("not in the test's network namespace %s: %v", os.Getenv(envNetns), err)
		return 1
	}
	home, err := os.MkdirTemp("", "cdsim-home")
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer os.RemoveAll(home)
	for _, v := range []string{"HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"} {
		os.Setenv(v, home)
	}
	newHost = newSimHost
	return m.Run()
}

// realMain runs the scenarios against the real Dicer daemon named by
// DICER_ADDRESS and DICER_TOKEN.
func realMain(m *testing.M) int {
	if err := checkRealDicer(); err != nil {
		fatalf("%v", err)
		return 1
	}
	stop := relaySignals()
	bin, cleanup, err := caddyBinary()
	stop() // the tests take signals as usual
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer cleanup()
	caddyBin = bin
	newHost = newRealHost
	return m.Run()
}

// helloMain is an instance's process: it serves "hello from <name>" on its
// address until SIGTERM or SIGINT (the simulator sends SIGKILL, SIGSTOP and
// SIGCONT).
func helloMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := dicertest.ServeHelloProcess(ctx, os.Getenv(envHelloAddr), os.Getenv(envHelloName)); err != nil {
		fmt.Fprintf(os.Stderr, "e2e hello %s: %v\n", os.Getenv(envHelloName), err)
		return 3
	}
	return 0
}

// Versions and module path of the build; the Makefile passes its own
// CADDY_VERSION and XCADDY_VERSION.
const module = "github.com/caddy-dicer/caddy-dicer"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// caddyBinary builds Caddy with the plugin from this checkout with xcaddy,
// as a user would, into a temporary directory, and returns its path and a
// cleanup. CADDY_DICER_E2E_CADDY names a binary to use instead.
func caddyBinary() (string, func(), error) {
	if bin := os.Getenv(envCaddy); bin != "" {
		fmt.Fprintf(os.Stderr, "e2e: using the Caddy binary %s (%s)\n", bin, envCaddy)
		return bin, func() {}, nil
	}
	root, err := filepath.Abs("..") // go test runs in the package directory, e2e/
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", buildPrefix, os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	caddyVersion, xcaddyVersion := envOr("CADDY_VERSION", "v2.11.9"), envOr("XCADDY_VERSION", "v0.4.5")
	bin := filepath.Join(dir, "caddy")
	// xcaddy resolves an unpublished module only at the zero pseudo-version.
	cmd := exec.Command("go", "run", "github.com/caddyserver/xcaddy/cmd/xcaddy@"+xcaddyVersion,
		"build", caddyVersion,
		"--with", module+"@v0.0.0-00010101000000-000000000000="+root,
		// The layer-4 handler (R14) and caddy-l4, as docs/layer4.md builds
		// them; the unversioned --replace lets xcaddy take the layer4
		// package from the checkout rather than look it up.
		"--with", "github.com/mholt/caddy-l4@v0.1.2",
		"--replace", module+"="+root,
		"--with", module+"/modules/l4dicer",
		"--output", bin)
	cmd.Dir = root
	fmt.Fprintf(os.Stderr, "e2e: building Caddy %s with xcaddy %s and %s\n", caddyVersion, xcaddyVersion, root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that a signal reaches xcaddy and the go
	// build under it, and xcaddy removes its build directory.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	start := time.Now()
	err = startRelaying(cmd, true)
	if err == nil {
		err = cmd.Wait()
		stopRelaying()
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("xcaddy build: %w\n%s", err, out.String())
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, cleanup, nil
}
