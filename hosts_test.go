package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// permissionFor is a permission over a catalog holding instances, with the
// given settings applied.
func permissionFor(t testing.TB, settings hostPermission, instances ...catalog.Instance) *hostPermission {
	t.Helper()
	c := catalog.New(catalog.Options{})
	c.Replace(instances)
	p := settings
	p.conn, p.logger = &connection{catalog: c}, zap.NewNop()
	p.decisions = newDecisionCounters(p.conn)
	if err := p.settle(); err != nil {
		t.Fatal(err)
	}
	return &p
}

func claimant(name, hosts string, labels ...string) catalog.Instance {
	l := map[string]string{"caddy.host": hosts}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return catalog.Instance{ID: name, Name: name, Labels: l, State: catalog.StateStopped}
}

// TestCertificateAllowed is R7 and R7a on a catalog, without Caddy.
func TestCertificateAllowed(t *testing.T) {
	instances := []catalog.Instance{
		claimant("shop", "shop.example.com", "tenant", "trusted"),
		claimant("apex", "example.com", "tenant", "trusted"),
		claimant("other", "shop.example.net", "tenant", "trusted"),
		claimant("evil", "evil.example.com"),
		claimant("wild", "*.w.example.com", "tenant", "trusted"),
		claimant("taken", "b.w.example.com"), // outside the tenant: takes b from wild (R2a)
	}
	allowAll := hostPermission{}
	strict := hostPermission{AllowSuffix: []string{"Example.COM."}, Selector: "tenant=trusted"}
	wild := hostPermission{AllowSuffix: []string{"example.com"}, Selector: "tenant=trusted", Wildcards: "allow"}
	for _, tc := range []struct {
		name     string
		settings hostPermission
		host     string
		want     error // nil: allowed
	}{
		{"R7_claimed", allowAll, "shop.example.com", nil},
		{"R7_unclaimed", allowAll, "scanner.example.org", errNotClaimed},
		{"R7a_wildcards_refused_by_default", allowAll, "a.w.example.com", errOnlyWildcard},
		{"R7a_wildcards_refuse_explicit", hostPermission{Wildcards: "refuse"}, "a.w.example.com", errOnlyWildcard},
		{"R7a_allow_suffix_name_under", strict, "SHOP.example.com", nil},
		{"R7a_allow_suffix_domain_itself", strict, "example.com", nil},
		{"R7a_allow_suffix_outside", strict, "shop.example.net", errNotUnderSuffix},
		{"R7a_allow_suffix_not_a_label_boundary", hostPermission{AllowSuffix: []string{"ample.com"}}, "shop.example.com", errNotUnderSuffix},
		{"R7a_selector_outside_tenant", strict, "evil.example.com", errNotClaimed},
		{"R7a_wildcards_allow", wild, "a.w.example.com", nil},
		{"R7a_wildcards_allow_still_one_label", wild, "a.b.w.example.com", errNotClaimed},
		{"R7a_R2a_exact_claim_outside_selector_beats_wildcard", wild, "b.w.example.com", errNotClaimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := permissionFor(t, tc.settings, instances...)
			err := p.CertificateAllowed(context.Background(), tc.host)
			if err != tc.want {
				t.Fatalf("CertificateAllowed(%q) = %v, want %v", tc.host, err, tc.want)
			}
			if err != nil && !errors.Is(err, caddytls.ErrPermissionDenied) {
				t.Errorf("refusal %v does not wrap caddytls.ErrPermissionDenied", err)
			}
		})
	}
}

// TestCertificateRefusalAllocatesNothing: a scanner's names cost no
// allocation, whatever the reason for the refusal.
func TestCertificateRefusalAllocatesNothing(t *testing.T) {
	p := permissionFor(t, hostPermission{AllowSuffix: []string{"example.com"}},
		claimant("wild", "*.w.example.com"))
	ctx := context.Background()
	for _, name := range []string{"scanner.example.net", "scanner.example.com", "scanner.w.example.com"} {
		if n := testing.AllocsPerRun(100, func() { _ = p.CertificateAllowed(ctx, name) }); n != 0 {
			t.Errorf("refusing %s: %v allocations, want 0", name, n)
		}
	}
}

// hostRequest is a GET for host to Caddy's HTTP port.
func hostRequest(t *testing.T, host string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return req
}

// TestCaddy_R2a_wildcard_route_and_exact_takeover: through Caddy, a
// wildcard instance serves the names under it, and an instance that lists
// one of them exactly takes that name over, without a reload.
func TestCaddy_R2a_wildcard_route_and_exact_takeover(t *testing.T) {
	needsCaddy(t)
	d, sock := testDaemon(t)
	instance(t, d, "wild", "127.0.0.121", map[string]string{"caddy.host": "*.example.com"})
	config, _ := caddyConfig(t, "", hostSite(sock))
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")

	// The listener may still be changing hands from an earlier test's
	// config: wait for the first answer through transport errors.
	eventually(t, "a.example.com answered by wild", func() bool {
		res, err := tester.Client.Do(hostRequest(t, "a.example.com"))
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode == http.StatusOK && string(body) == hello("wild")
	})
	answers(t, tester, "B.Example.com", http.StatusOK, hello("wild"))
	for _, host := range []string{"example.com", "a.b.example.com", "a.example.net"} {
		if status, _ := get(t, tester, host); status != http.StatusServiceUnavailable {
			t.Errorf("host %s: got %d, want 503 (a wildcard matches one label)", host, status)
		}
	}

	instance(t, d, "bee", "127.0.0.122", map[string]string{"caddy.host": "b.example.com"})
	answers(t, tester, "b.example.com", http.StatusOK, hello("bee"))
	for range 5 {
		if status, body := get(t, tester, "b.example.com"); body != hello("bee") {
			t.Fatalf("b.example.com after the exact claim: got %d %q, want only bee", status, body)
		}
	}
	answers(t, tester, "a.example.com", http.StatusOK, hello("wild"))
}

// TestCaddy_R7a_on_demand_tls_permission_settings: through Caddy with
// `tls internal { on_demand }`, the permission honours allow_suffix,
// selector and wildcards.
func TestCaddy_R7a_on_demand_tls_permission_settings(t *testing.T) {
	needsCaddy(t)
	d, sock := testDaemon(t)
	instance(t, d, "shop", "127.0.0.123", map[string]string{"caddy.host": "shop.example.com", "tenant": "trusted"})
	instance(t, d, "outside", "127.0.0.124", map[string]string{"caddy.host": "shop.example.net", "tenant": "trusted"})
	instance(t, d, "evil", "127.0.0.125", map[string]string{"caddy.host": "evil.example.com"})
	instance(t, d, "wild", "127.0.0.126", map[string]string{"caddy.host": "*.w.example.com", "tenant": "trusted"})
	site := fmt.Sprintf(`
https:// {
	tls internal {
		on_demand
	}
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, sock)
	permission := func(wildcards string) string {
		return fmt.Sprintf(`
on_demand_tls {
	permission dicer {
		address unix:%s
		allow_suffix example.com
		selector tenant=trusted
		wildcards %s
	}
}`, sock, wildcards)
	}

	// Certificates outlive a config (Caddy's cache and storage, across
	// tests and -count): the wildcard name is new to each run.
	wildName := fmt.Sprintf("r%d.w.example.com", time.Now().UnixNano())

	config, logFile := caddyConfig(t, permission("refuse"), site)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	if err := tlsHandshake("shop.example.com"); err != nil {
		t.Errorf("shop.example.com (tenant, under allow_suffix): handshake failed: %v", err)
	}
	for name, why := range map[string]string{
		"shop.example.net": "outside allow_suffix",
		"evil.example.com": "claimed outside the selector",
		wildName:           "only a wildcard claims it, wildcards refuse",
	} {
		if err := tlsHandshake(name); err == nil {
			t.Errorf("%s (%s): handshake succeeded", name, why)
		}
	}
	eventually(t, "the refusal of evil.example.com logged at debug", func() bool {
		return len(logLines(t, logFile, `"level":"debug"`, "on-demand certificate refused", "evil.example.com")) > 0
	})

	config, _ = caddyConfig(t, permission("allow"), site)
	tester.InitServer(config, "caddyfile")
	if err := tlsHandshake(wildName); err != nil {
		t.Errorf("%s with wildcards allow: handshake failed: %v", wildName, err)
	}
	if err := tlsHandshake("a.b.w.example.com"); err == nil {
		t.Error("a.b.w.example.com: handshake succeeded, but a wildcard matches one label")
	}
}
