package catalog

import (
	"net/netip"
	"strings"
	"testing"
)

// Every spelling of an address dials that address, and spellings do not
// repeat within their cycle: a transport that pools connections by dial
// address never reuses one across a freeze.
func TestSpelling(t *testing.T) {
	for _, tc := range []struct {
		host  string
		cycle int // distinct spellings before they repeat (besides host)
	}{
		{"10.0.0.1", 16384},
		{"192.168.1.10", 16384},
		{"fd00::1", 1 << 20}, // more than checked here
		{"2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff", 1 << 20},
	} {
		want := netip.MustParseAddr(tc.host).Unmap()
		seen := map[string]bool{tc.host: true}
		limit := min(tc.cycle, 20000)
		for n := uint32(1); n <= uint32(limit); n++ {
			s := spelling(tc.host, n)
			if seen[s] {
				t.Fatalf("%s: spelling %d = %q repeats an earlier one", tc.host, n, s)
			}
			seen[s] = true
			got, err := netip.ParseAddr(s)
			if err != nil || got.Unmap() != want {
				t.Fatalf("%s: spelling %d = %q parses as %v, %v", tc.host, n, s, got, err)
			}
		}
		if tc.cycle == 16384 && spelling(tc.host, 16385) != spelling(tc.host, 1) {
			t.Errorf("%s: the cycle is not 16384 spellings long", tc.host)
		}
	}
	if got := spelling("10.0.0.1", 1); got != "0:0:0:0:0:ffff:10.0.0.1" {
		t.Errorf("first spelling of 10.0.0.1 = %q", got)
	}
	if got := spelling("10.0.0.1", 0); got != "10.0.0.1" {
		t.Errorf("spelling 0 = %q, want the host itself", got)
	}
}

// An IPv6 address already written out in full never gets itself as a new
// spelling; one with no other spelling, a zone, or a name without letters
// stays as it is.
func TestSpellingEdges(t *testing.T) {
	full := "2001:db8:1:2:3:4:5:6"
	if got := spelling(full, 1); got == full {
		t.Errorf("spelling 1 of %s is the address itself", full)
	}
	for _, h := range []string{"1234:5678:1234:5678:1234:5678:1234:5678", "fe80::1%eth0", "42"} {
		if got := spelling(h, 3); got != h {
			t.Errorf("spelling(%q) = %q, want it unchanged", h, got)
		}
	}
	seen := map[string]bool{"dicer-host.lan": true}
	for n := uint32(1); n < 1000; n++ {
		s := spelling("dicer-host.lan", n)
		if !strings.EqualFold(s, "dicer-host.lan") || seen[s] {
			t.Fatalf("name spelling %d = %q (seen before: %v)", n, s, seen[s])
		}
		seen[s] = true
	}
}
