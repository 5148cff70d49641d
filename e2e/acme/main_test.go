//go:build e2e && linux

package acme

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// The test binary runs in one of two modes:
//
//   - outer (what go test starts): build Caddy with xcaddy, make the
//     network namespace cdacme-<pid> (loopback only), re-run itself inside
//     it with the same flags, then kill what runs there and delete it;
//   - inner (envNetns set): start Pebble and its DNS, run the tests, remove
//     the test containers.
const (
	envEnable = "CADDY_DICER_ACME"       // 1: run (make test-acme sets it)
	envNetns  = "CADDY_DICER_ACME_NETNS" // inner mode: the namespace's name
	envCaddy  = "CADDY_DICER_E2E_CADDY"  // the Caddy binary; set to skip the build
	// outerLabel marks the inner run's containers with the outer process's
	// PID, so that the outer one removes them even if the inner run was
	// killed before its own cleanup.
	outerLabel = "caddy-dicer.test.acme-outer"
	envOuter   = "CADDY_DICER_ACME_OUTER" // inner mode: the outer process's PID
	nsPrefix   = "cdacme-"
	module     = "github.com/caddy-dicer/caddy-dicer"
)

var caddyBin string

func TestMain(m *testing.M) {
	flag.Parse()
	switch {
	case os.Getenv(envNetns) != "":
		os.Exit(innerMain(m))
	case testing.Short() || os.Getenv(envEnable) != "1":
		fmt.Println("e2e/acme: skipped: needs root, the Docker Engine and Debian's pebble; run make test-acme")
		os.Exit(0)
	default:
		os.Exit(outerMain())
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FATAL: e2e/acme: "+format+"\n", args...)
}

// outerMain builds Caddy, runs the tests in a namespace of their own and
// removes it, with everything in it, whatever happened.
func outerMain() int {
	if os.Geteuid() != 0 {
		fatalf("needs root (a network namespace, veth links into test containers)")
		return 1
	}
	for _, bin := range []string{"pebble", "pebble-challtestsrv", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			fatalf("%s is not installed (apt-get install pebble iproute2 util-linux)", bin)
			return 1
		}
	}
	removeStale()
	bin, cleanup, err := caddyBinary()
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer cleanup()
	ns := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	defer deleteNamespace(ns)
	defer removeContainers()
	if err := ip("netns", "add", ns); err != nil {
		fatalf("%v", err)
		return 1
	}
	if err := ip("-n", ns, "link", "set", "lo", "up"); err != nil {
		fatalf("%v", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", nsPrefix, os.Getpid()))
	if err != nil {
		fatalf("%v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, exe}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envNetns+"="+ns, envCaddy+"="+bin, envOuter+"="+strconv.Itoa(os.Getpid()), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
		return 1
	}
	stop := relay(cmd.Process)
	err = cmd.Wait()
	stop()
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		return code
	}
	fatalf("tests in %s: %v", ns, err)
	return 1
}

// innerMain starts the CA, runs the tests and removes their containers.
func innerMain(m *testing.M) int {
	caddyBin = os.Getenv(envCaddy)
	if err := checkNamespace(); err != nil {
		fatalf("not in the test's namespace %s: %v", os.Getenv(envNetns), err)
		return 1
	}
	stop, err := startCA()
	if err != nil {
		fatalf("starting Pebble: %v", err)
		return 1
	}
	defer stop()
	return dockertest.Main(m)
}

// caddyBinary builds Caddy with this checkout by xcaddy, as the e2e suite
// does (CADDY_DICER_E2E_CADDY names a ready binary instead).
func caddyBinary() (string, func(), error) {
	if bin := os.Getenv(envCaddy); bin != "" {
		return bin, func() {}, nil
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%sbuild-%d-", nsPrefix, os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	bin := filepath.Join(dir, "caddy")
	cmd := exec.Command("go", "run", "github.com/caddyserver/xcaddy/cmd/xcaddy@"+envOr("XCADDY_VERSION", "v0.4.5"),
		"build", envOr("CADDY_VERSION", "v2.11.9"),
		"--with", module+"@v0.0.0-00010101000000-000000000000="+root, "--output", bin)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("xcaddy build: %w\n%s", err, out.String())
	}
	fmt.Fprintf(os.Stderr, "e2e/acme: built Caddy in %s\n", time.Since(start).Round(100*time.Millisecond))
	return bin, cleanup, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteNamespace kills every process left in ns (all the run's: the
// tests, Caddy, Pebble) and deletes it.
func deleteNamespace(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := ip("netns", "del", ns); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/acme: %v\n", err)
	}
}

// removeContainers removes the containers the inner run left (none, when
// it ended normally).
func removeContainers() {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", fmt.Sprintf("label=%s=%d", outerLabel, os.Getpid())).Output()
	if ids := strings.Fields(string(out)); err == nil && len(ids) > 0 {
		fmt.Fprintf(os.Stderr, "e2e/acme: removing %d containers the tests left\n", len(ids))
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

// removeStale deletes the namespaces and directories of runs that were
// killed (their process is gone).
func removeStale() {
	gone := func(pid string) bool {
		n, err := strconv.Atoi(pid)
		return err == nil && syscall.Kill(n, 0) == syscall.ESRCH
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) && gone(strings.TrimPrefix(f[0], nsPrefix)) {
			deleteNamespace(f[0])
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), nsPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(strings.TrimPrefix(filepath.Base(d), nsPrefix), "build-")
		if pid, _, ok := strings.Cut(rest, "-"); ok && gone(pid) {
			os.RemoveAll(d)
		}
	}
}

// checkNamespace makes sure this process runs in a namespace with no route
// out: no default route (only links the tests add to their containers).
func checkNamespace() error {
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(routes)), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
			return fmt.Errorf("the namespace has a default route: %s", line)
		}
	}
	return nil
}

// relay passes SIGINT and SIGTERM on to p (the inner run), so that it
// cleans up, until stop.
func relay(p *os.Process) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signalNotify(sigs)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = p.Signal(s)
			case <-done:
				return
			}
		}
	}()
	return func() { signalStop(sigs); close(done) }
}
