//go:build linux

package caddydicer

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R7e against a real DNS server: BIND 9 from Debian, in a network
// namespace of the test's own, taking TSIG-signed dynamic updates, and
// the dns.providers.rfc2136 module. Run by `make test-dns` (root, named,
// dig, ip; CADDY_DICER_DNS=1): the addresses 10.216.0.1-2 are fixed.
const (
	dnsHostIP   = "10.216.0.1"
	dnsServerIP = "10.216.0.2"
	dnsZone     = "example.test"
	dnsTarget   = "203.0.113.7"
	dnsManualIP = "192.0.2.55"
)

// TestPermission_R7e_dns_records_BIND: an instance claims
// app.example.test and dig at the server answers its A record within a
// second, with the owner TXT beside it; a tenant's claim outside
// allow_suffix writes nothing; a record made by hand in the zone file is
// left as it is though an instance claims its name; once the claims go,
// the record stays for the grace period and then goes, the hand-made one
// stays.
func TestPermission_R7e_dns_records_BIND(t *testing.T) {
	if testing.Short() || os.Getenv("CADDY_DICER_DNS") == "" {
		t.Skip("needs root, BIND 9 (named), dig and the fixed addresses 10.216.0.1-2: make test-dns")
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	key := base64.StdEncoding.EncodeToString(secret)
	startBIND(t, key)

	const grace = 3 * time.Second
	p := permissionFor(t, hostPermission{AllowSuffix: []string{"app.example.test", "manual.example.test"}})
	cat := p.conn.Catalog()

	mod, err := caddy.GetModule("dns.providers.rfc2136")
	if err != nil {
		t.Fatal(err)
	}
	prov := mod.New()
	raw, _ := json.Marshal(map[string]string{"server": dnsServerIP + ":53", "key_name": "caddy", "key": key})
	if err := json.Unmarshal(raw, prov); err != nil {
		t.Fatal(err)
	}
	if err := prov.(caddy.Provisioner).Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	p.DNSRecords = &DNSRecords{Zones: []string{dnsZone}, Addresses: []string{dnsTarget}, Grace: caddy.Duration(grace)}
	cfg, err := p.DNSRecords.config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider = prov.(dnsrecords.Provider)
	p.startDNS(cfg)
	t.Cleanup(p.cleanupDNS)

	created := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "create", "ok"))
	start := time.Now()
	cat.Put(claimant("app", "app.example.test"))
	cat.Put(claimant("tenant", "tenant.example.test"))
	cat.Put(claimant("hand", "manual.example.test"))
	testkit.Eventually(t, time.Second, "app.example.test's A record at the server", func() bool {
		return slices.Equal(dig(t, "app.example.test", "A"), []string{dnsTarget})
	})
	t.Logf("R7e: the A record answered %v after the claim", time.Since(start).Round(time.Millisecond))
	if got := dig(t, "_caddy-dicer.app.example.test", "TXT"); !slices.Equal(got, []string{`"heritage=caddy-dicer,owner=caddy-dicer"`}) {
		t.Fatalf("owner TXT: %q", got)
	}
	// The same pass decided the other claims: nothing for them.
	if got := dig(t, "tenant.example.test", "A"); len(got) != 0 {
		t.Fatalf("a claim outside allow_suffix got a record: %q", got)
	}
	if got := dig(t, "_caddy-dicer.manual.example.test", "TXT"); len(got) != 0 {
		t.Fatalf("the hand-made record's name got an owner TXT: %q", got)
	}
	if got := dig(t, "manual.example.test", "A"); !slices.Equal(got, []string{dnsManualIP}) {
		t.Fatalf("the hand-made record changed: %q", got)
	}
	if n := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "create", "ok")) - created; n != 1 {
		t.Fatalf("caddy_dicer_dns_updates_total{op=create,result=ok} grew by %v, want 1", n)
	}

	gone := time.Now()
	cat.Delete("app")
	cat.Delete("hand")
	cat.Delete("tenant")
	time.Sleep(grace / 2) // the grace period holds: nothing to wait for
	if got := dig(t, "app.example.test", "A"); !slices.Equal(got, []string{dnsTarget}) {
		t.Fatalf("the record went within the grace period: %q", got)
	}
	testkit.Eventually(t, grace+3*time.Second, "app.example.test's record removed after the grace period", func() bool {
		return len(dig(t, "app.example.test", "A")) == 0 && len(dig(t, "_caddy-dicer.app.example.test", "TXT")) == 0
	})
	t.Logf("R7e: the record went %v after the last claim (grace %v)", time.Since(gone).Round(time.Millisecond), grace)
	if got := dig(t, "manual.example.test", "A"); !slices.Equal(got, []string{dnsManualIP}) {
		t.Fatalf("the hand-made record did not survive: %q", got)
	}
}

// dig asks the test's server for name's records of type, +short.
func dig(t *testing.T, name, typ string) []string {
	t.Helper()
	out, err := exec.Command("dig", "@"+dnsServerIP, name, typ, "+short", "+time=1", "+tries=1").Output()
	if err != nil {
		t.Fatalf("dig %s %s: %v", name, typ, err)
	}
	return strings.Fields(string(out))
}

// startBIND runs named on a zone example.test that takes updates signed
// by the TSIG key caddy (secret key), in a network namespace reached
// through a veth pair: 10.216.0.1 here, 10.216.0.2 there. The namespace
// and named go at the test's end, and at SIGINT or SIGTERM.
func startBIND(t *testing.T, key string) {
	t.Helper()
	for _, tool := range []string{"named", "dig", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (apt-get install bind9 bind9-dnsutils iproute2 util-linux): %v", tool, err)
		}
	}
	ns := fmt.Sprintf("cddns-%d", os.Getpid())
	hostIf := fmt.Sprintf("cdd%dh", os.Getpid()%1_000_000)
	nsIf := fmt.Sprintf("cdd%dn", os.Getpid()%1_000_000)
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
			fmt.Fprintf(os.Stderr, "dns test: %v: namespace %s removed\n", s, ns)
			os.Exit(1)
		case <-stop:
		}
	}()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", ns},
		{"addr", "add", dnsHostIP + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", ns, "addr", "add", dnsServerIP + "/30", "dev", nsIf},
		{"-n", ns, "link", "set", nsIf, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	dir := t.TempDir()
	zone := fmt.Sprintf(`$TTL 300
@	IN SOA ns.%[1]s. hostmaster.%[1]s. 1 3600 600 86400 60
@	IN NS ns
ns	IN A %[2]s
manual	IN A %[3]s
`, dnsZone, dnsServerIP, dnsManualIP)
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
key "caddy" {
	algorithm hmac-sha256;
	secret "%[3]s";
};
zone "%[4]s" {
	type primary;
	file "%[1]s/%[4]s.zone";
	allow-update { key caddy; };
	allow-transfer { key caddy; };
};
`, dir, dnsServerIP, key, dnsZone)
	if err := os.WriteFile(filepath.Join(dir, dnsZone+".zone"), []byte(zone), 0o644); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "named.log"))
	if err != nil {
		t.Fatal(err)
	}
	named = exec.Command("nsenter", "--net=/var/run/netns/"+ns, "named", "-g", "-c", confPath)
	named.Stdout, named.Stderr = log, log
	if err := named.Start(); err != nil {
		t.Fatal(err)
	}
	if !testkit.Until(10*time.Second, func() bool {
		out, _ := exec.Command("dig", "@"+dnsServerIP, "ns."+dnsZone, "A", "+short", "+time=1", "+tries=1").Output()
		return strings.TrimSpace(string(out)) == dnsServerIP
	}) {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("named did not answer within 10s:\n%s", b)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("named's log:\n%s", b)
		}
	})
}
