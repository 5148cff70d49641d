package foreignlabels

import "testing"

// caddy-docker-proxy reads a segment's ordering prefix and isolating
// suffix as any run of digits (^(?:(\d+)_)?(.*?)(?:_(\d+))?$), and a
// Caddyfile token has no surrounding blanks: a protection spelled with a
// long prefix or suffix, or blanks around its name, is still one.
func TestProtection_R2f_long_order_prefixes_and_blanks_still_refused(t *testing.T) {
	for _, k := range []string{
		"caddy.12345_basic_auth",
		"caddy.basic_auth_123456",
		"caddy.0000000001_forward_auth_99999",
		"caddy.route.100000_basicauth",
		"caddy.tls.client_auth_12345",
		"caddy.99999_import",
		"caddy. basic_auth",
		"caddy.basic_auth\t",
	} {
		labels := map[string]string{"caddy": "a.example", "caddy.reverse_proxy": "{{upstreams 80}}", k: "u h"}
		if r := Protection(labels); r == nil || r.Label != k {
			t.Errorf("%q: refusal %+v, want one naming the label", k, r)
		}
	}
	for _, k := range []string{"caddy.basic_authx", "caddy.x_basic_auth", "caddy.basic_auth_1x"} {
		if r := Protection(map[string]string{"caddy": "a.example", k: "v"}); r != nil {
			t.Errorf("%q is not a protection, refused: %s", k, r.Why)
		}
	}
}
