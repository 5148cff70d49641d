//go:build e2e && linux

package layer4

import (
	"archive/tar"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// dnsName is the name the dnsmasq image answers, from its hosts file.
const dnsName, dnsAnswer = "woken.dicer.test", "10.1.2.3"

// buildDnsmasqImage builds an image holding Debian's dnsmasq, as
// installed on this machine (apt-get install dnsmasq), the shared
// libraries ldd lists and a hosts file naming dnsName: FROM scratch,
// nothing pulled. It is removed when the test ends.
func buildDnsmasqImage(t *testing.T) string {
	t.Helper()
	const bin = "/usr/sbin/dnsmasq"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("dnsmasq is not installed (apt-get install dnsmasq): %v", err)
	}
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig is not installed (apt-get install bind9-dnsutils): %v", err)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	files := []string{bin}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(name, "/"), Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		add(f, 0o755, data)
	}
	add("/etc/dnshosts", 0o644, []byte(dnsAnswer+" "+dnsName+"\n"))
	add("/etc/passwd", 0o644, []byte("root:x:0:0::/:/bin/false\nnobody:x:65534:65534::/:/bin/false\n"))
	add("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ref := "caddy-dicer-test/l4-dnsmasq:" + dockertest.RunID()
	cmd := exec.Command("docker", "import",
		"--change", `CMD ["/usr/sbin/dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--addn-hosts=/etc/dnshosts", "--conf-file=/dev/null", "--pid-file=", "--user=root", "--log-facility=-", "--port=53"]`,
		"-", ref)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = dockertest.Docker(time.Minute, "rmi", "-f", ref) })
	return ref
}

// dig asks server (host:port) for dnsName over UDP, one try of timeout,
// and returns the answer's addresses.
func dig(server string, timeout time.Duration) (string, error) {
	cmd := exec.Command("dig", "@"+host(server), "-p", port(server), dnsName, "A",
		"+short", "+tries=1", "+notcp", "+timeout="+strconv.Itoa(int(timeout.Seconds())))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dig: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// startUDPRoute runs Caddy with one layer-4 UDP route on a free port of
// 127.0.0.1: dicer_proxy docker sel 53, the server's idle_timeout idle;
// it returns the route's address once Caddy holds its socket.
func startUDPRoute(t *testing.T, sel string, idle time.Duration) string {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "127.0.0.1"))
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	startCaddy(t, admin, fmt.Sprintf(`{
	admin %s
	layer4 {
		udp/%s {
			idle_timeout %s
			route {
				dicer_proxy docker %s 53 {
					wake_timeout 30s
				}
			}
		}
	}
}
`, admin, addr, idle, sel))
	// A datagram would wake the container: wait until Caddy holds the
	// port instead (a bind of it fails).
	testkit.Eventually(t, 30*time.Second, "Caddy's UDP listener "+addr+" is bound", func() bool {
		pc, err := net.ListenPacket("udp", addr)
		if err == nil {
			pc.Close()
		}
		return err != nil
	})
	return addr
}

// R14d: a DNS server in a container on standby (Debian's dnsmasq) is
// woken by the first query sent through Caddy's UDP listener, which is
// answered (delivered after the wake, not dropped: dig tries once); later
// queries are answered; queries keep it up; once they stop, it goes on
// standby after the flows' idle_timeout and standby_after, and the next
// query wakes it again.
func TestL4_R14d_dig_wakes_a_dnsmasq_container_on_standby(t *testing.T) {
	img := buildDnsmasqImage(t)
	const after, idle = 2 * time.Second, 2 * time.Second
	c := dockertest.Start(t, cli, dockertest.Options{Name: "l4dns", Image: img, NoStart: true,
		Labels: map[string]string{"cdl4.case": "dns", "caddy.standby_after": after.String()}})
	start := time.Now()
	if out, err := dockertest.Docker(time.Minute, "start", c.ID); err != nil {
		t.Fatalf("docker start: %v\n%s", err, out)
	}
	ip := testkit.ContainerIP(t, cli, c.ID, "bridge")
	testkit.Eventually(t, 30*time.Second, "dnsmasq answers directly", func() bool {
		got, err := dig(net.JoinHostPort(ip, "53"), time.Second)
		return err == nil && got == dnsAnswer
	})
	own := time.Since(start)
	if out, err := dockertest.Docker(time.Minute, "stop", "-t", "1", c.ID); err != nil {
		t.Fatalf("docker stop: %v\n%s", err, out)
	}
	testkit.WaitState(t, cli, c.ID, c.Name, "exited", 30*time.Second)

	addr := startUDPRoute(t, caseSelector("dns"), idle)
	ev := testkit.WatchContainer(t, cli, c.ID)
	start = time.Now()
	got, err := dig(addr, 60*time.Second)
	took := time.Since(start)
	if err != nil || got != dnsAnswer {
		t.Fatalf("the first query to the container on standby: %q, %v; want %s (the query delivered after the wake)", got, err, dnsAnswer)
	}
	if n := ev.Count(events.ActionStart); n != 1 {
		t.Errorf("%d start events, want 1", n)
	}
	t.Logf("first query answered after %s; the container's own start to its first answer %s", took.Round(time.Millisecond), own.Round(time.Millisecond))
	for i := range 5 {
		if got, err := dig(addr, 5*time.Second); err != nil || got != dnsAnswer {
			t.Fatalf("query %d after the wake: %q, %v", i+2, got, err)
		}
	}
	// Queries every half second for three times standby_after: up.
	for end := time.Now().Add(3 * after); time.Now().Before(end); {
		if got, err := dig(addr, 5*time.Second); err != nil || got != dnsAnswer {
			t.Fatalf("a query while it is busy: %q, %v", got, err)
		}
		if n := ev.Count(events.ActionStop) + ev.Count(events.ActionDie); n > 0 {
			t.Fatalf("the container was stopped while queries came every half second (standby_after %s)", after)
		}
		time.Sleep(500 * time.Millisecond) // the pace of the client's queries
	}
	last := time.Now()
	testkit.Eventually(t, idle+after+30*time.Second, "the container goes on standby once the queries stop", func() bool {
		return testkit.ContainerState(t, cli, c.ID) == "exited"
	})
	t.Logf("on standby %s after the last query (idle_timeout %s, standby_after %s)", time.Since(last).Round(time.Millisecond), idle, after)
	if got, err := dig(addr, 60*time.Second); err != nil || got != dnsAnswer {
		t.Fatalf("a query after the standby: %q, %v; want it woken again and answered", got, err)
	}
	if n := ev.Count(events.ActionStart); n != 2 {
		t.Errorf("%d start events, want 2", n)
	}
}
