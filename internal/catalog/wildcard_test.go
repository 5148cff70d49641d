package catalog_test

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// TestTargetsWildcard is R2a: `*.example.com` stands for exactly one label
// in its place, and an instance listing a host exactly takes it over from
// every wildcard.
func TestTargetsWildcard(t *testing.T) {
	wild := host("*.example.com")
	runTargets(t, []targetsCase{
		{
			name:      "R2a_wildcard_matches_one_label",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: "a.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name:      "R2a_wildcard_case_port_and_label_dot",
			instances: []catalog.Instance{inst("wild", host("*.Example.COM."))},
			port:      8080, host: "A.example.com:443",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name:      "R2a_R2b_wildcard_request_trailing_dot_not_ignored",
			instances: []catalog.Instance{inst("wild", host("*.Example.COM."))},
			port:      8080, host: "A.example.com.:443",
		},
		{
			name:      "R2a_wildcard_not_the_domain_itself",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: "example.com",
		},
		{
			name:      "R2a_wildcard_not_two_labels",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: "a.b.example.com",
		},
		{
			name:      "R2a_wildcard_not_an_empty_label",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: ".example.com",
		},
		{
			name:      "R2a_wildcard_not_another_domain",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: "a.example.net",
		},
		{
			name:      "R2a_star_inside_a_name_matches_nothing",
			instances: []catalog.Instance{inst("odd", host("a.*.example.com, *example.com, *"))},
			port:      8080, host: "a.b.example.com",
		},
		{
			name:      "R2a_literal_star_host_not_served",
			instances: []catalog.Instance{inst("wild", wild)},
			port:      8080, host: "*.example.com",
		},
		{
			name: "R2a_several_wildcard_claimants_in_name_order",
			instances: []catalog.Instance{
				inst("wild-2", wild, addr("10.0.0.3")),
				inst("wild-1", host("shop.example.net, *.example.com"), addr("10.0.0.2")),
			},
			port: 8080, host: "a.example.com",
			want: []string{"wild-1 10.0.0.2:8080", "wild-2 10.0.0.3:8080"},
		},
		{
			name: "R2a_exact_claim_wins_over_wildcard",
			instances: []catalog.Instance{
				inst("wild", wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3")),
			},
			port: 8080, host: "b.example.com",
			want: []string{"bee 10.0.0.3:8080"},
		},
		{
			name: "R2a_exact_claim_leaves_other_names_to_wildcard",
			instances: []catalog.Instance{
				inst("wild", wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3")),
			},
			port: 8080, host: "c.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name: "R2a_exact_claim_wins_even_when_not_routable",
			instances: []catalog.Instance{
				inst("wild", wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3"), state(catalog.StateStopped)),
			},
			port: 8080, host: "b.example.com",
		},
		{
			name: "R2a_exact_claim_removed_wildcard_takes_host_back",
			instances: []catalog.Instance{
				inst("wild", wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3")),
				inst("bee", host("other.example.net"), addr("10.0.0.3")),
			},
			port: 8080, host: "b.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name: "R2a_instance_listing_host_and_wildcard_serves_both",
			instances: []catalog.Instance{
				inst("both", host("example.com, *.example.com")),
			},
			port: 8080, host: "example.com",
			want: []string{"both 10.0.0.2:8080"},
		},
		{
			name: "R2a_selector_wildcard_instance_gets_matching_host",
			instances: []catalog.Instance{
				inst("wild", label("app", "web"), wild),
			},
			sel: "app=web", port: 8080, host: "a.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name: "R2a_selector_wildcard_instance_not_other_hosts",
			instances: []catalog.Instance{
				inst("wild", label("app", "web"), wild),
			},
			sel: "app=web", port: 8080, host: "a.example.net",
		},
		{
			// An instance outside the selector gets none of the route's
			// requests, so it takes no host from the route's wildcard
			// claimant (R2a among the route's candidates), in any state.
			name: "R2a_selector_exact_claim_outside_view_leaves_host_to_wildcard_in_view",
			instances: []catalog.Instance{
				inst("wild", label("app", "web"), wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3")),
			},
			sel: "app=web", port: 8080, host: "b.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name: "R2a_selector_stopped_exact_claim_outside_view_leaves_host_to_wildcard_in_view",
			instances: []catalog.Instance{
				inst("wild", label("app", "web"), wild, addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3"), state(catalog.StateStopped)),
			},
			sel: "app=web", port: 8080, host: "b.example.com",
			want: []string{"wild 10.0.0.2:8080"},
		},
		{
			name: "R2a_selector_exact_claim_in_view_wins_over_wildcard_in_view",
			instances: []catalog.Instance{
				inst("wild", label("app", "web"), wild, addr("10.0.0.2")),
				inst("bee", label("app", "web"), host("b.example.com"), addr("10.0.0.3"), state(catalog.StateStopped)),
				inst("out", host("b.example.com"), addr("10.0.0.4")),
			},
			sel: "app=web", port: 8080, host: "b.example.com",
		},
		{
			name: "R2a_selector_instance_without_host_label_unaffected",
			instances: []catalog.Instance{
				inst("any", label("app", "web"), addr("10.0.0.2")),
				inst("bee", host("b.example.com"), addr("10.0.0.3")),
			},
			sel: "app=web", port: 8080, host: "b.example.com",
			want: []string{"any 10.0.0.2:8080"},
		},
		{
			name: "R2a_R5_wildcard_standby_fallback",
			instances: []catalog.Instance{
				inst("wild", wild, wake(), standby(), publish("", 32768, 8080), gateway("10.0.0.1")),
			},
			port: 8080, host: "a.example.com",
			want: []string{"wild 10.0.0.1:32768"},
		},
		{
			name:      "R2_host_label_without_valid_host_serves_nothing",
			instances: []catalog.Instance{inst("odd", label("app", "web"), host("*"))},
			sel:       "app=web", port: 8080, host: "a.example.com",
		},
	})
}

// TestClaimOf is R7 with R2a: how a host is claimed, by whom it counts.
func TestClaimOf(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("wild", host("*.example.com"), label("tenant", "a"), state(catalog.StateStopped)))
	c.Put(inst("bee", host("b.example.com"), label("tenant", "b")))
	c.Put(inst("shop", host("shop.example.net"), label("tenant", "a")))
	c.Put(inst("both", host("*.both.example.org"), label("tenant", "b")))
	c.Put(inst("both-a", host("*.both.example.org"), label("tenant", "a")))
	tenantA := selector.MustParse("tenant=a")
	for _, tc := range []struct {
		name string
		host string
		sel  *selector.Selector
		want catalog.Claim
	}{
		{"R7_exact", "b.example.com", nil, catalog.ClaimedExactly},
		{"R7_R2a_wildcard_any_state", "a.example.com", nil, catalog.ClaimedByWildcard},
		{"R7_R2a_wildcard_not_domain", "example.com", nil, catalog.Unclaimed},
		{"R7_R2a_wildcard_not_two_labels", "a.b.example.com", nil, catalog.Unclaimed},
		{"R7_unclaimed", "scanner.example.net", nil, catalog.Unclaimed},
		{"R7_selector_exact_in", "shop.example.net", &tenantA, catalog.ClaimedExactly},
		{"R7_selector_exact_out", "b.example.com", &tenantA, catalog.Unclaimed},
		{"R7_selector_wildcard_in", "a.example.com", &tenantA, catalog.ClaimedByWildcard},
		{"R7_R2a_selector_exact_outside_takes_name_from_wildcard_inside", "b.example.com", &tenantA, catalog.Unclaimed},
		{"R7_selector_one_of_several_wildcard_claimants", "x.both.example.org", &tenantA, catalog.ClaimedByWildcard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Snapshot().ClaimOf(tc.host, tc.sel); got != tc.want {
				t.Errorf("ClaimOf(%q) = %v, want %v", tc.host, got, tc.want)
			}
			if got := c.Snapshot().Claimed(tc.host); tc.sel == nil && got != (tc.want != catalog.Unclaimed) {
				t.Errorf("Claimed(%q) = %v", tc.host, got)
			}
		})
	}
	c.Delete("id-wild")
	if c.Snapshot().Claimed("a.example.com") || c.Snapshot().Wildcards() != 1 {
		t.Errorf("deleted wildcard claimant: a.example.com still claimed, or %d suffixes indexed, want 1", c.Snapshot().Wildcards())
	}
}

// matchesNaively is the oracle for R2a: pattern (a caddy.host entry)
// matches host by comparing labels one by one.
func matchesNaively(pattern, host string) bool {
	// A label's entries lose every trailing dot, as NormalizeName does; a
	// request host keeps its own (R2b).
	pattern, host = strings.ToLower(strings.TrimRight(pattern, ".")), strings.ToLower(host)
	pl, hl := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pl) < 2 || len(pl) != len(hl) || pl[0] != "*" {
		return false
	}
	if hl[0] == "" || strings.Contains(hl[0], "*") {
		return false
	}
	for i := 1; i < len(pl); i++ {
		if pl[i] == "" || pl[i] == "*" || strings.Contains(pl[i], "*") || strings.Contains(pl[i], ":") || pl[i] != hl[i] {
			return false
		}
	}
	return true
}

// FuzzWildcardMatch checks R2a's index (a wildcard suffix looked up by the
// request host minus its first label) against matchesNaively, for a lone
// claimant on a host route: it is served exactly when its label names the
// host or has a wildcard matching it.
func FuzzWildcardMatch(f *testing.F) {
	f.Add("*.example.com", "a.example.com")
	f.Add("*.example.com", "example.com")
	f.Add("*.example.com", "a.b.example.com")
	f.Add("*.Example.com.", "A.EXAMPLE.COM")
	f.Add("*.com", "x.com")
	f.Add("*.example.com", "a.example.com.")
	f.Add("*.example.com.", "a.example.com..")
	f.Fuzz(func(t *testing.T, pattern, rawHost string) {
		if strings.ContainsAny(pattern, ",:[]") || strings.ContainsAny(rawHost, ":[]") ||
			strings.TrimSpace(pattern) != pattern || !ascii(pattern+rawHost) {
			t.Skip() // label syntax (lists, ports, spaces, case folding beyond ASCII) is tested elsewhere
		}
		c := catalog.New(catalog.Options{})
		c.Put(inst("wild", host(pattern)))
		h := catalog.NormalizeHost(rawHost)
		got := len(c.Snapshot().Targets(nil, catalog.Route{Port: 8080}, h)) == 1
		exact := strings.ToLower(strings.TrimRight(pattern, ".")) == h && h != "" && !strings.Contains(h, "*")
		if want := exact || matchesNaively(pattern, rawHost); got != want {
			t.Errorf("pattern %q, host %q: served %v, want %v", pattern, rawHost, got, want)
		}
		if got != (c.Snapshot().ClaimOf(h, nil) != catalog.Unclaimed) {
			t.Errorf("pattern %q, host %q: ClaimOf disagrees with Targets", pattern, rawHost)
		}
	})
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 || s[i] < 0x20 {
			return false
		}
	}
	return true
}
