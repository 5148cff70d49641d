//go:build e2e && linux

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The simulated Dicer host lives in a network namespace of the suite's
// own: the daemon, the instances, Caddy and the test's HTTP client all run
// in it. It has a loopback and one bridge, sim0 (Dicer's network bridge,
// without ports), holding the gateway address and, as they are created, the
// instance addresses of a private subnet. It has no route out, so no test
// traffic can leave it.
const (
	nsPrefix  = "cdsim-" // + the outer test process's PID
	simLink   = "sim0"
	gatewayIP = "10.213.0.1"
	subnet    = "10.213.0.0/24"
)

// ip runs the ip command and returns its error with its output.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createNamespace creates ns with lo up and the bridge holding the gateway
// address. A bridge needs no kernel module that a container may lack (the
// dummy link type does).
func createNamespace(ns string) error {
	if err := ip("netns", "add", ns); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", simLink, "type", "bridge"},
		{"-n", ns, "addr", "add", gatewayIP + "/24", "dev", simLink},
		{"-n", ns, "link", "set", simLink, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// deleteNamespace kills every process still in ns (all of them this
// suite's: the inner test binary, Caddy, instances) and deletes it.
func deleteNamespace(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := ip("netns", "del", ns); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
	}
}

// Temporary directories of a run, named <prefix><pid>-<random>: the Caddy
// build and the tests' TMPDIR.
const (
	buildPrefix = "caddy-dicer-e2e-"
	tmpPrefix   = "cdsim-tmp-"
)

// gone reports whether the run of the outer process pid has ended.
func gone(pid string) bool {
	n, err := strconv.Atoi(pid)
	return err == nil && syscall.Kill(n, 0) == syscall.ESRCH
}

// removeStale deletes what earlier runs left behind when they were killed
// (SIGKILL leaves no chance to clean up): namespaces and temporary
// directories whose owner process is gone.
func removeStale() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], nsPrefix) || !gone(strings.TrimPrefix(fields[0], nsPrefix)) {
			continue // not ours, or its run is still going
		}
		fmt.Fprintf(os.Stderr, "e2e: removing the stale namespace %s\n", fields[0])
		deleteNamespace(fields[0])
	}
	for _, prefix := range []string{buildPrefix, tmpPrefix} {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*-*"))
		for _, d := range dirs {
			pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
			if gone(pid) {
				fmt.Fprintf(os.Stderr, "e2e: removing the stale directory %s\n", d)
				os.RemoveAll(d)
			}
		}
	}
}

// checkNamespace makes sure this process is in the suite's namespace: sim0
// carries the gateway address, and there is no route but the subnet's.
func checkNamespace() error {
	ifc, err := net.InterfaceByName(simLink)
	if err != nil {
		return err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return err
	}
	found := false
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == gatewayIP {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s lacks %s", simLink, gatewayIP)
	}
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(routes)), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 1 && f[0] != simLink {
			return fmt.Errorf("unexpected route on %s: %s", f[0], line)
		}
		if len(f) > 1 && f[1] == "00000000" {
			return errors.New("the namespace has a default route")
		}
	}
	return nil
}

// Instance addresses: 10.213.0.10 and up, one per instance of the run.
var (
	addrMu   sync.Mutex
	nextHost = 10
)

// newInstanceIP takes the next instance address and adds it to sim0, so
// that an instance's process can bind it.
func newInstanceIP() (string, error) {
	addrMu.Lock()
	n := nextHost
	nextHost++
	addrMu.Unlock()
	if n > 254 {
		return "", errors.New("out of instance addresses in " + subnet)
	}
	addr := fmt.Sprintf("10.213.0.%d", n)
	return addr, ip("addr", "add", addr+"/32", "dev", simLink)
}
