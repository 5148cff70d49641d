package catalog_test

import (
	"net"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// FuzzHost checks the caddy.host label and request-host normalisation
// (R2, R2b, R7) on any label value and any request host:
//   - NormalizeHost reads a request host as Caddy's host matcher does
//     (caddyRequestHost), then lower-cases its ASCII letters only;
//   - each host the label lists is claimed, and so is each request form of
//     it that Caddy's site for that host matches (upper case, a port), and
//     none with a trailing dot, which Caddy's site does not match (R2b);
//   - the request host is claimed exactly when its normalised form is one
//     the label lists, and a host route sends it to the instance exactly
//     then;
//   - on a selector route, an instance with a caddy.host label serves only
//     the hosts it lists (R2), none if it lists none; only an instance with
//     no label, or a blank one, serves every host.
//
// Wildcard patterns (R2a) have their own target, FuzzWildcardMatch: labels
// with a `*` are left to it.
func FuzzHost(f *testing.F) {
	for _, s := range [][2]string{
		{"shop.example.com", "shop.example.com"},
		{"Shop.Example.com, www.shop.example.com.:443", "WWW.Shop.Example.Com.:8443"},
		{"shop.example.com,,blog.example.com", "blog.example.com."},
		{" , ", "shop.example.com"},
		{"", ""},
		{"[fd00::1]:443", "[FD00::1]"},
		{"fd00::1", "[fd00::1]:443"},
		{"192.0.2.1", "192.0.2.1:80"},
		{"bücher.example", "BÜCHER.example"},
		{"a..", "a."},
		{"internal.example.com", "internal.example.com.:80"},
		{"internal.example.com", "[internal.example.com]"},
		{"[a:b]", "a:b"},
		{"shop.example.com", "evil.example.com"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, hostLabel, request string) {
		if strings.Contains(hostLabel, "*") {
			t.Skip("wildcards: FuzzWildcardMatch")
		}
		norm := catalog.NormalizeHost(request)
		if want := asciiLower(caddyRequestHost(request)); norm != want {
			t.Fatalf("NormalizeHost(%q) = %q, want %q as Caddy's host matcher reads it", request, norm, want)
		}
		if strings.ContainsFunc(norm, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
			t.Fatalf("NormalizeHost(%q) = %q: not lower case", request, norm)
		}

		// listed are the names the label lists, as the catalog must index
		// them: each comma-separated item, trimmed and normalised.
		var listed []string
		for _, h := range strings.Split(hostLabel, ",") {
			if n := catalog.NormalizeName(strings.TrimSpace(h)); n != "" {
				listed = append(listed, n)
			}
		}
		isListed := func(h string) bool {
			for _, l := range listed {
				if l == h {
					return true
				}
			}
			return false
		}

		c := catalog.New(catalog.Options{})
		sel, err := selector.Parse("app=web")
		if err != nil {
			t.Fatal(err)
		}
		view := c.Watch(sel)
		c.Put(inst("web", label(catalog.LabelHost, hostLabel, "app", "web")))
		snap := c.Snapshot()
		served := func(route catalog.Route, host string) bool {
			ts := snap.Targets(nil, route, host)
			if len(ts) > 1 || len(ts) == 1 && (ts[0].Instance != "web" || ts[0].Dial != "10.0.0.2:8080") {
				t.Fatalf("label %q, host %q: Targets = %v, want at most web at 10.0.0.2:8080", hostLabel, host, ts)
			}
			return len(ts) == 1
		}
		hostRoute := catalog.Route{Port: 8080}
		selRoute := catalog.Route{View: view, Port: 8080}

		for _, l := range listed {
			for _, form := range requestForms(l) {
				h := catalog.NormalizeHost(form)
				if !snap.Claimed(h) || !served(hostRoute, h) || !served(selRoute, h) {
					t.Fatalf("label %q lists %q, but the request host %q (normalised %q) is not claimed and served", hostLabel, l, form, h)
				}
			}
			for _, form := range dottedForms(l) {
				h := catalog.NormalizeHost(form)
				if isListed(h) {
					continue // the label lists that name too
				}
				if snap.Claimed(h) || served(hostRoute, h) || served(selRoute, h) {
					t.Fatalf("R2b: label %q lists %q, and the request host %q (normalised %q), which Caddy's site %q does not match, is claimed or served", hostLabel, l, form, h, l)
				}
			}
		}

		want := isListed(norm)
		if got := snap.Claimed(norm); got != want {
			t.Fatalf("label %q: Claimed(NormalizeHost(%q) = %q) = %v, want %v (listed: %q)", hostLabel, request, norm, got, want, listed)
		}
		if got := served(hostRoute, norm); got != want {
			t.Fatalf("label %q: host route serves %q = %v, want %v (listed: %q)", hostLabel, norm, got, want, listed)
		}
		if got, want := served(selRoute, norm), strings.TrimSpace(hostLabel) == "" || want; got != want {
			t.Fatalf("label %q: selector route serves %q = %v, want %v (listed: %q)", hostLabel, norm, got, want, listed)
		}
	})
}

// requestForms are the ways a request (Host header or TLS server name) may
// spell the normalised host h that Caddy's site h matches: in upper case,
// with a port. Forms that only make sense for a name or an IP literal are
// limited to hosts made of the characters such names have.
func requestForms(h string) []string {
	if strings.ContainsAny(h, "[]") {
		return nil // no request host reads as a name with a bracket
	}
	forms := []string{h, asciiUpper(h)}
	if strings.ContainsAny(h, " \t") {
		return forms
	}
	if strings.Contains(h, ":") {
		return append(forms, "["+h+"]", "["+asciiUpper(h)+"]:443")
	}
	return append(forms, h+":443", asciiUpper(h)+":8443", h+":", "["+h+"]")
}

// dottedForms are spellings of h with trailing dots, which Caddy's site h
// does not match (R2b).
func dottedForms(h string) []string {
	forms := []string{h + ".", h + "..", asciiUpper(h) + "."}
	if strings.ContainsFunc(h, func(r rune) bool { return r == '[' || r == ']' || r == ':' }) {
		return forms
	}
	return append(forms, h+".:80", asciiUpper(h)+"..:8443")
}

// caddyRequestHost is how Caddy's host matcher (caddyhttp.MatchHost, v2.11)
// reads a request's Host before it compares it with a site address,
// ignoring ASCII case: its own lines.
func caddyRequestHost(host string) string {
	reqHost, _, err := net.SplitHostPort(host)
	if err != nil {
		reqHost = host
		reqHost = strings.TrimPrefix(reqHost, "[")
		reqHost = strings.TrimSuffix(reqHost, "]")
	}
	return reqHost
}

// asciiLower lower-cases the ASCII letters of s only.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// asciiUpper upper-cases the ASCII letters of s only, as a client may; DNS
// names are case-insensitive in ASCII only (RFC 4343).
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// TestNormalizeHostFuzzFindings holds what FuzzHost found, each also in
// testdata/fuzz/FuzzHost.
func TestNormalizeHostFuzzFindings(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		// ASCII letters only change case: "a\xbd" and "A\xbd" were told
		// apart since strings.ToLower also rewrote the invalid byte.
		{"R2_invalid_utf8_keeps_bytes", "A\xbd", "a\xbd"},
		{"R2_non_ascii_letter_kept", "AÄ", "aÄ"},
		{"R2_non_ascii_letter_alone_kept", "Ä", "Ä"},
		// As Caddy reads them (R2b): brackets without a port are trimmed.
		{"R2b_bracketed_single_colon", "[:]", ":"},
		{"R2b_bracketed_name_and_colon", "[a:b]", "a:b"},
		{"R2_bracketed_ipv6_port", "[FD00::1]:443", "fd00::1"},
		{"R2b_every_trailing_dot_kept", "a..", "a.."},
		{"R2b_trailing_dots_and_port", "Shop.Example.com..:443", "shop.example.com.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := catalog.NormalizeHost(tc.in)
			if got != tc.want {
				t.Errorf("NormalizeHost(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if caddy := asciiLower(caddyRequestHost(tc.in)); got != caddy {
				t.Errorf("NormalizeHost(%q) = %q, Caddy reads %q", tc.in, got, caddy)
			}
		})
	}

	// A label and a request host that differ only in ASCII case match; a
	// label's trailing dots are dropped, a request's are not (R2b).
	c := catalog.New(catalog.Options{})
	c.Put(inst("web", host("bÜcher.example, a\xbd, a..")))
	for _, h := range []string{"BÜCHER.EXAMPLE", "A\xbd", "A"} {
		if !c.Snapshot().Claimed(catalog.NormalizeHost(h)) {
			t.Errorf("R7: %q not claimed by the label %q", h, "bÜcher.example, a\xbd, a..")
		}
	}
	for _, h := range []string{"a.", "a..", "A.:443"} {
		if c.Snapshot().Claimed(catalog.NormalizeHost(h)) {
			t.Errorf("R2b: %q claimed by the label %q", h, "bÜcher.example, a\xbd, a..")
		}
	}
}
