//go:build linux

package caddydicer

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R7e against a real DNS server: BIND 9 from Debian, in a network
// namespace of the test's own, taking TSIG-signed dynamic updates, and
// the dns.providers.rfc2136 module. Run by `make test-dns` (root, named,
// dig, ip; CADDY_DICER_DNS=1): the addresses 10.216.0.1-2 are fixed
// (testkit.StartBIND's subnet 0).
const (
	dnsZone     = "example.test"
	dnsTarget   = "203.0.113.7"
	dnsManualIP = "192.0.2.55"
	dnsHandAAAA = "2001:db8::55"
)

// TestPermission_R7e_dns_records_BIND: an instance claims
// app.example.test and dig at the server answers its A record within a
// second, with the owner TXT beside it; a tenant's claim outside
// allow_suffix writes nothing; a record made by hand in the zone file is
// left as it is though an instance claims its name, and so are records
// made by hand beside Caddy's A on a name it owns (AAAA, TXT, MX); once
// the claims go, the record stays for the grace period and then goes,
// the hand-made ones stay. Two permissions sharing a storage's locks (two Caddys of a
// fleet) write and remove the record once.
func TestPermission_R7e_dns_records_BIND(t *testing.T) {
	if testing.Short() || os.Getenv("CADDY_DICER_DNS") == "" {
		t.Skip("needs root, BIND 9 (named), dig and the fixed addresses 10.216.0.1-2: make test-dns")
	}
	bind := testkit.StartBIND(t, 0, dnsZone, "manual IN A "+dnsManualIP)
	dig := func(name, typ string) []string { return bind.Dig(t, name, typ) }

	const grace = 3 * time.Second
	p := permissionFor(t, hostPermission{AllowSuffix: []string{"app.example.test", "manual.example.test"}})
	cat := p.conn.Catalog()

	mod, err := caddy.GetModule("dns.providers.rfc2136")
	if err != nil {
		t.Fatal(err)
	}
	prov := mod.New()
	raw, _ := json.Marshal(map[string]string{"server": bind.Server + ":53", "key_name": bind.KeyName, "key": bind.Key})
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
	// Two Caddys of a fleet: two permissions on the daemon's catalog
	// sharing a file storage's locks, writing each record once.
	cfg.Locker = &certmagic.FileStorage{Path: t.TempDir()}
	fleetmate := permissionFor(t, hostPermission{AllowSuffix: p.AllowSuffix})
	fleetmate.conn = p.conn
	fleetmate.DNSRecords = &DNSRecords{}
	for _, q := range []*hostPermission{p, fleetmate} {
		q.startDNS(cfg)
		t.Cleanup(q.cleanupDNS)
	}

	created := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "create", "ok"))
	deleted := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "delete", "ok"))
	start := time.Now()
	cat.Put(claimant("app", "app.example.test"))
	cat.Put(claimant("tenant", "tenant.example.test"))
	cat.Put(claimant("hand", "manual.example.test"))
	testkit.Eventually(t, time.Second, "app.example.test's A record at the server", func() bool {
		return slices.Equal(dig("app.example.test", "A"), []string{dnsTarget})
	})
	t.Logf("R7e: the A record answered %v after the claim", time.Since(start).Round(time.Millisecond))
	if got := dig("_caddy-dicer.app.example.test", "TXT"); !slices.Equal(got, []string{`"heritage=caddy-dicer,owner=caddy-dicer,targets=` + dnsTarget + `"`}) {
		t.Fatalf("owner TXT: %q", got)
	}
	// The same pass decided the other claims: nothing for them.
	if got := dig("tenant.example.test", "A"); len(got) != 0 {
		t.Fatalf("a claim outside allow_suffix got a record: %q", got)
	}
	if got := dig("_caddy-dicer.manual.example.test", "TXT"); len(got) != 0 {
		t.Fatalf("the hand-made record's name got an owner TXT: %q", got)
	}
	if got := dig("manual.example.test", "A"); !slices.Equal(got, []string{dnsManualIP}) {
		t.Fatalf("the hand-made record changed: %q", got)
	}
	// The fleetmate's pass, after the lock, finds the record there.
	testkit.Eventually(t, 3*time.Second, "the fleetmate sees the record as published", func() bool {
		st := fleetmate.DNSStatus()
		return len(st) == 1 && st[0].Published == 1 && st[0].Pending == 0
	})
	if n := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "create", "ok")) - created; n != 1 {
		t.Fatalf("caddy_dicer_dns_updates_total{op=create,result=ok} grew by %v: the fleet of two wrote %v times, want once", n, n)
	}

	// Records made by hand beside Caddy's A on the name it owns (an
	// AAAA, a TXT, an MX) stay through the next pass that reads the zone
	// and ensures app.example.test (a new claim makes one), and through
	// the removal below.
	hand := []libdns.Record{
		libdns.Address{Name: "app", TTL: time.Minute, IP: netip.MustParseAddr(dnsHandAAAA)},
		libdns.TXT{Name: "app", TTL: time.Minute, Text: "v=spf1,hand-made"},
		libdns.MX{Name: "app", TTL: time.Minute, Preference: 10, Target: "ns.example.test."}, // BIND wants an MX target with an address,
	}
	if _, err := cfg.Provider.AppendRecords(context.Background(), dnsZone, hand); err != nil {
		t.Fatalf("the records made by hand: %v", err)
	}
	handMade := func(when string) {
		t.Helper()
		for _, typ := range []string{"AAAA", "TXT", "MX"} {
			if got := dig("app.example.test", typ); len(got) == 0 {
				t.Fatalf("%s: the hand-made %s record of app.example.test: %q", when, typ, got)
			}
		}
	}
	cat.Put(claimant("app2", "two.app.example.test"))
	testkit.Eventually(t, 3*time.Second, "two.app.example.test's A record at the server", func() bool {
		return slices.Equal(dig("two.app.example.test", "A"), []string{dnsTarget})
	})
	handMade("after a pass that read the zone")

	gone := time.Now()
	cat.Delete("app")
	cat.Delete("app2")
	cat.Delete("hand")
	cat.Delete("tenant")
	time.Sleep(grace / 2) // the grace period holds: nothing to wait for
	if got := dig("app.example.test", "A"); !slices.Equal(got, []string{dnsTarget}) {
		t.Fatalf("the record went within the grace period: %q", got)
	}
	testkit.Eventually(t, grace+3*time.Second, "app.example.test's record removed after the grace period", func() bool {
		return len(dig("app.example.test", "A")) == 0 && len(dig("_caddy-dicer.app.example.test", "TXT")) == 0 &&
			len(dig("two.app.example.test", "A")) == 0
	})
	handMade("after the removal")
	t.Logf("R7e: the record went %v after the last claim (grace %v)", time.Since(gone).Round(time.Millisecond), grace)
	if got := dig("manual.example.test", "A"); !slices.Equal(got, []string{dnsManualIP}) {
		t.Fatalf("the hand-made record did not survive: %q", got)
	}
	testkit.Eventually(t, 3*time.Second, "both Caddys past the removal", func() bool {
		return fleetmate.DNSStatus()[0].Gone == 0 && p.DNSStatus()[0].Gone == 0
	})
	if n := testutil.ToFloat64(dnsrecords.Updates.WithLabelValues(dnsZone, "delete", "ok")) - deleted; n != 2 {
		t.Fatalf("the fleet of two removed the two hosts' records %v times, want once each", n)
	}
}
