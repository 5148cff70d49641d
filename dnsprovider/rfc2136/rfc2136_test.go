package rfc2136

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/libdns/libdns"
)

// TestRFC2136DNSSettings: each missing or wrong setting is an error that
// names it; a server without a port gets 53.
func TestRFC2136DNSSettings(t *testing.T) {
	ok := Provider{Server: "10.0.0.53", KeyName: "caddy", Key: "c2VjcmV0"}
	if err := ok.settle(); err != nil || ok.Server != "10.0.0.53:53" {
		t.Fatalf("%v, server %q", err, ok.Server)
	}
	for _, tc := range []struct {
		p    Provider
		want string
	}{
		{Provider{KeyName: "caddy", Key: "c2VjcmV0"}, "server:"},
		{Provider{Server: "a", Key: "c2VjcmV0"}, "key_name:"},
		{Provider{Server: "a", KeyName: "caddy", Key: "not base64!"}, "key:"},
		{Provider{Server: "a", KeyName: "caddy", Key: "c2VjcmV0", Algorithm: "md5"}, "algorithm:"},
	} {
		if err := tc.p.settle(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
	var p Provider
	err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser("rfc2136 {\nserver ns:5353\nkey_name k\nkey c2VjcmV0\nalgorithm hmac-sha512\ntimeout 3s\n}"))
	if err != nil || p.Server != "ns:5353" || p.Algorithm != "hmac-sha512" || time.Duration(p.Timeout) != 3*time.Second {
		t.Fatalf("%v: %+v", err, p)
	}
}

// TestRFC2136DNSRecordsRoundTrip: the libdns types become DNS records and
// back unchanged, a long TXT split into 255-byte strings.
func TestRFC2136DNSRecordsRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, r := range []libdns.Record{
		libdns.Address{Name: "app", TTL: time.Minute, IP: netip.MustParseAddr("203.0.113.7")},
		libdns.Address{Name: "app", TTL: time.Minute, IP: netip.MustParseAddr("2001:db8::7")},
		libdns.CNAME{Name: "www", TTL: time.Minute, Target: "lb.example.net."},
		libdns.TXT{Name: "_caddy-dicer.app", TTL: time.Minute, Text: long},
		libdns.RR{Name: "@", TTL: time.Minute, Type: "MX", Data: "10 mail.example.test."},
	} {
		rr, err := toRR(r, "example.test.")
		if err != nil {
			t.Fatal(err)
		}
		back := fromRR(rr, "example.test.")
		if back.RR() != r.RR() {
			t.Errorf("%v became %v", r.RR(), back.RR())
		}
	}
}
