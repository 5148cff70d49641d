package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
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
