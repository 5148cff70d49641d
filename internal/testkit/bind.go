package testkit

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BIND is a BIND 9 server (Debian's named) a test started in a network
// namespace of its own, serving one zone that takes dynamic updates
// signed by a TSIG key (hmac-sha256) and zone transfers by the same key
// (the dns_records tests, R7e).
type BIND struct {
	// Server is the server's address, reached through a veth pair from
	// the test's namespace.
	Server string
	// Zone is the zone it serves.
	Zone string
	// KeyName and Key are the TSIG key's name and base64 secret.
	KeyName, Key string
}

// StartBIND starts named on zone with the zone file's records (lines
// such as "manual IN A 192.0.2.55"; the SOA, NS and the NS's A record are
// made here) in a network namespace named after the test process and
// subnet, reached through a veth pair: 10.216.0.<4*subnet+1> here,
// .<4*subnet+2> there. The namespace and named go at the test's end,
// and at SIGINT or SIGTERM. It needs root, named, dig, ip and nsenter.
func StartBIND(t testing.TB, subnet int, zone string, records ...string) BIND {
	t.Helper()
	for _, tool := range []string{"named", "dig", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (apt-get install bind9 bind9-dnsutils iproute2 util-linux): %v", tool, err)
		}
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	b := BIND{Server: fmt.Sprintf("10.216.0.%d", 4*subnet+2), Zone: zone, KeyName: "caddy", Key: base64.StdEncoding.EncodeToString(secret)}
	here := fmt.Sprintf("10.216.0.%d", 4*subnet+1)
	pid := os.Getpid() % 100_000
	ns := fmt.Sprintf("cddns-%d-%d", pid, subnet)
	hostIf, nsIf := fmt.Sprintf("cdd%d.%dh", pid, subnet), fmt.Sprintf("cdd%d.%dn", pid, subnet)

	var once sync.Once
	var named *exec.Cmd
	cleanup := func() {
		once.Do(func() {
			if named != nil && named.Process != nil {
				_ = named.Process.Kill()
				_ = named.Wait()
			}
			_ = exec.Command("ip", "netns", "del", ns).Run()
			_ = exec.Command("ip", "link", "del", hostIf).Run()
		})
	}
	t.Cleanup(cleanup)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan struct{})
	t.Cleanup(func() { signal.Stop(sig); close(stop) })
	go func() {
		select {
		case s := <-sig:
			cleanup()
			fmt.Fprintf(os.Stderr, "testkit: %v: named stopped, namespace %s removed\n", s, ns)
			os.Exit(1)
		case <-stop:
		}
	}()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", ns},
		{"addr", "add", here + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", ns, "addr", "add", b.Server + "/30", "dev", nsIf},
		{"-n", ns, "link", "set", nsIf, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	dir := t.TempDir()
	zoneFile := fmt.Sprintf("$TTL 300\n@\tIN SOA ns.%[1]s. hostmaster.%[1]s. 1 3600 600 86400 60\n@\tIN NS ns\nns\tIN A %[2]s\n%[3]s\n",
		zone, b.Server, strings.Join(records, "\n"))
	conf := fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	listen-on port 53 { %[2]s; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	allow-query { any; };
};
key "%[5]s" {
	algorithm hmac-sha256;
	secret "%[3]s";
};
zone "%[4]s" {
	type primary;
	file "%[1]s/%[4]s.zone";
	allow-update { key "%[5]s"; };
	allow-transfer { key "%[5]s"; };
};
`, dir, b.Server, b.Key, zone, b.KeyName)
	if err := os.WriteFile(filepath.Join(dir, zone+".zone"), []byte(zoneFile), 0o644); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "named.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	named = exec.Command("nsenter", "--net=/var/run/netns/"+ns, "named", "-g", "-c", confPath)
	named.Stdout, named.Stderr = log, log
	if err := named.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("named's log:\n%s", out)
		}
	})
	if !Until(10*time.Second, func() bool {
		got, err := b.dig("ns."+zone, "A")
		return err == nil && strings.Join(got, " ") == b.Server
	}) {
		t.Fatalf("named did not answer at %s within 10s", b.Server)
	}
	return b
}

// Dig asks the server for name's records of type, as `dig +short` prints
// them (a TXT quoted).
func (b BIND) Dig(t testing.TB, name, typ string) []string {
	t.Helper()
	got, err := b.dig(name, typ)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (b BIND) dig(name, typ string) ([]string, error) {
	out, err := exec.Command("dig", "@"+b.Server, name, typ, "+short", "+time=1", "+tries=1").Output()
	if err != nil {
		return nil, fmt.Errorf("dig %s %s: %w", name, typ, err)
	}
	return strings.Fields(string(out)), nil
}
