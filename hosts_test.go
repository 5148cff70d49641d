package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// permissionFor is a permission over a catalog holding instances, with the
// given settings applied.
func permissionFor(t testing.TB, settings hostPermission, instances ...catalog.Instance) *hostPermission {
	t.Helper()
	c := catalog.New(catalog.Options{})
	c.Replace(instances)
	p := settings
	p.conn, p.logger = connection.Fixture{Catalog: c}.Conn(), zap.NewNop()
	p.decisions = p.conn.Decisions()
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
	tester, _ := startCaddy(t, "", hostSite(sock))

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
		return len(testkit.LogLines(t, logFile, `"level":"debug"`, "on-demand certificate refused", "evil.example.com")) > 0
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

// TestCertificateAllowed_R2c_label_over_the_caps: an instance whose
// caddy.host label lists 20,000 names gets a certificate for none of them.
func TestCertificateAllowed_R2c_label_over_the_caps(t *testing.T) {
	names := make([]string, 20000)
	for i := range names {
		names[i] = fmt.Sprintf("h%05d.example.com", i)
	}
	p := permissionFor(t, hostPermission{}, claimant("big", strings.Join(names, ",")),
		claimant("shop", "shop.example.com"))
	ctx := context.Background()
	for _, name := range names {
		if err := p.CertificateAllowed(ctx, name); err != errNotClaimed {
			t.Fatalf("CertificateAllowed(%s) = %v, want %v: the label is over the caps (R2c)", name, err, errNotClaimed)
		}
	}
	if err := p.CertificateAllowed(ctx, "shop.example.com"); err != nil {
		t.Errorf("shop.example.com: %v, want allowed", err)
	}
}

// TestCertificateAllowed_R2b_trailing_dot: a server name is read as a
// request host is: with a trailing dot, it is not the name a label lists.
func TestCertificateAllowed_R2b_trailing_dot(t *testing.T) {
	p := permissionFor(t, hostPermission{AllowSuffix: []string{"example.com."}}, claimant("shop", "shop.example.com."))
	ctx := context.Background()
	if err := p.CertificateAllowed(ctx, "Shop.Example.com"); err != nil {
		t.Errorf("Shop.Example.com: %v, want allowed (a label's trailing dot is ignored)", err)
	}
	for _, name := range []string{"shop.example.com.", "shop.example.com.."} {
		if err := p.CertificateAllowed(ctx, name); err == nil {
			t.Errorf("%s: allowed, want refused (R2b)", name)
		}
	}
}

// protectedSites are the site addresses FuzzHostMatchesCaddy protects, as
// Caddy's host matcher holds them, each with the instance that claims it
// (the label lists the site's name), at its own address.
var protectedSites = []struct {
	site, instance, label, ip string
}{
	{"internal.example.com", "internal", "internal.example.com", "10.0.1.1"},
	{"*.wild.example.com", "wild", "*.wild.example.com", "10.0.1.2"},
	{"192.0.2.7", "ip", "192.0.2.7", "10.0.1.3"},
	{"fd00::7", "v6", "[fd00::7]", "10.0.1.4"},
}

// FuzzHostMatchesCaddy is R2b against Caddy's own host matcher
// (caddyhttp.MatchHost, provisioned for each protected site's address):
// for any Host, whenever a site's matcher does not match it, so that the
// request goes to a catch-all site instead, the plugin's host route (the
// catch-all's `dynamic dicer`) does not send it to the instance claiming
// that site's name. Another instance's `*.example.com` is there too, to
// be taken over (R2a) where it may.
func FuzzHostMatchesCaddy(f *testing.F) {
	for _, h := range []string{
		"internal.example.com", "internal.example.com.", "internal.example.com..", "internal.example.com.:80",
		"INTERNAL.Example.COM:9080", "[internal.example.com]", "[internal.example.com]:80", "internal.example.com:",
		"a.wild.example.com", "a.wild.example.com.", "A.WILD.example.com.:443", ".wild.example.com", "a.b.wild.example.com",
		"192.0.2.7", "192.0.2.7.", "192.0.2.7:80", "[fd00::7]:443", "fd00::7", "[FD00::7].", "x.example.com",
		"internal.example.com\x00", "İnternal.example.com", "internal.example.com%2e",
	} {
		f.Add(h)
	}
	instances := []catalog.Instance{routed("outsider", "10.0.2.1", "caddy.host", "*.example.com")}
	matchers := make([]caddyhttp.MatchHost, len(protectedSites))
	for i, p := range protectedSites {
		instances = append(instances, routed(p.instance, p.ip, "caddy.host", p.label))
		matchers[i] = caddyhttp.MatchHost{p.site}
		if err := matchers[i].Provision(caddy.Context{}); err != nil {
			f.Fatal(err)
		}
	}
	source := member(f, "", instances...)
	repl := caddy.NewReplacer()
	f.Fuzz(func(t *testing.T, host string) {
		r := httptest.NewRequest(http.MethodGet, "http://example.net/", nil)
		r.Host = host
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		ups, err := source.GetUpstreams(r)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range protectedSites {
			if matchers[i].Match(r) {
				continue
			}
			for _, u := range ups {
				if u.Dial == p.ip+":8080" {
					t.Fatalf("Host %q: Caddy's site %s does not match it, and the plugin sends it to %s, which claims that site (R2b)", host, p.site, p.instance)
				}
			}
		}
	})
}

// TestCaddy_R2b_trailing_dot_does_not_bypass_a_protected_site: a site
// with basic_auth for internal.example.com next to a catch-all site, both
// routing by caddy.host. A Host that Caddy's site does not match
// (a trailing dot, two, a dot and a port) goes to the catch-all, which
// must not serve the protected instance: 503, never its 200.
func TestCaddy_R2b_trailing_dot_does_not_bypass_a_protected_site(t *testing.T) {
	needsCaddy(t)
	d, sock := testDaemon(t)
	instance(t, d, "internal", "127.0.0.127", map[string]string{"caddy.host": "internal.example.com"})
	instance(t, d, "public", "127.0.0.128", map[string]string{"caddy.host": "public.example.com"})
	route := fmt.Sprintf(`reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}`, sock)
	tester, _ := startCaddy(t, "", fmt.Sprintf(`
http://internal.example.com {
	basic_auth {
		admin $2a$04$hf8FmHy9dLr82nWXLKLpge98EvctiwRbOapAGbqJjymP4nNFGoPZi
	}
	%s
}

http:// {
	%s
}`, route, route))

	eventually(t, "public.example.com answered by public", func() bool {
		res, err := tester.Client.Do(hostRequest(t, "public.example.com"))
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode == http.StatusOK && string(body) == hello("public")
	})
	authorized := hostRequest(t, "internal.example.com")
	authorized.SetBasicAuth("admin", "s3cret")
	res, err := tester.Client.Do(authorized)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != hello("internal") {
		t.Fatalf("internal.example.com with its password: got %d %q, want 200 %q", res.StatusCode, body, hello("internal"))
	}
	for host, want := range map[string]int{
		"internal.example.com":           http.StatusUnauthorized,
		"INTERNAL.Example.com:9080":      http.StatusUnauthorized,
		"internal.example.com.":          http.StatusServiceUnavailable,
		"internal.example.com..":         http.StatusServiceUnavailable,
		"internal.example.com.:80":       http.StatusServiceUnavailable,
		"internal.example.com.:9080":     http.StatusServiceUnavailable,
		"Internal.Example.COM.":          http.StatusServiceUnavailable,
		"public.example.com.":            http.StatusServiceUnavailable,
		"unclaimed.internal.example.com": http.StatusServiceUnavailable,
	} {
		if status, body := get(t, tester, host); status != want {
			t.Errorf("Host %q: got %d %q, want %d", host, status, body, want)
		}
	}
}
