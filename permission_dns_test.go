package caddydicer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// R7e's settings from the Caddyfile: the dns_records block of a
// permission, its provider block given to the provider module, and the
// errors naming the setting at fault.
func TestPermission_R7e_dns_records_Caddyfile(t *testing.T) {
	var p DockerPermission
	err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`docker {
		allow_suffix example.test
		dns_records {
			provider rfc2136 {
				server 10.0.0.53:53
				key_name caddy
				key c2VjcmV0
			}
			zone example.test
			address 203.0.113.7 2001:db8::7
			ttl 30s
			grace 2m
			owner fleet-a
			max_records_per_instance 5
			max_records 50
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	r := p.DNSRecords
	if r == nil || len(r.Zones) != 1 || len(r.Addresses) != 2 || r.Owner != "fleet-a" || r.MaxRecords != 50 || r.MaxRecordsPerInstance != 5 {
		t.Fatalf("parsed %+v", r)
	}
	var prov map[string]string
	if err := json.Unmarshal(r.ProviderRaw, &prov); err != nil || prov["name"] != "rfc2136" || prov["server"] != "10.0.0.53:53" || prov["key"] != "c2VjcmV0" {
		t.Fatalf("provider %s: %v", r.ProviderRaw, err)
	}

	for _, tc := range []struct{ block, want string }{
		{"zone example.test\naddress 203.0.113.7", "dns_records provider: wants a DNS provider"},
		{"provider rfc2136 {\nserver a\n}\naddress 203.0.113.7", "dns_records zone: wants the zones"},
		{"provider rfc2136 {\nserver a\n}\nzone example.test", "dns_records address: wants this Caddy's public addresses"},
		{"provider rfc2136 {\nserver a\n}\nzone example.test\naddress 203.0.113.7\ncname lb.example.net", "exclude each other"},
		{"provider rfc2136 {\nserver a\n}\nzone example.test\naddress not-an-ip", `"not-an-ip" is not an IP address`},
		{"provider rfc2136 {\nserver a\n}\nzone example.test\naddress 203.0.113.7\nowner \"a b\"", "dns_records owner"},
		{"provider rfc2136 {\nserver a\n}\nzone example.test\naddress 203.0.113.7\ngrace soon", "dns_records grace"},
		{"provider rfc2136 {\nserver a\n}\nzone example.test\naddress 203.0.113.7\nmax_records 0", "dns_records max_records"},
		{"provider nosuch\nzone example.test\naddress 203.0.113.7", "nosuch"},
		{"records 3", "unrecognized dns_records setting 'records'"},
	} {
		err := new(DockerPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("docker {\ndns_records {\n" + tc.block + "\n}\n}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.block, err, tc.want)
		}
	}
}
