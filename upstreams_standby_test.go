package caddydicer

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/clients"
)

// R5d: a held request counts under the share of its client: Caddy's
// client_ip (which follows trusted_proxies) when set, else the remote
// address; an IPv6 client is its /64.
func TestHoldContext_R5d_client_is_client_ip(t *testing.T) {
	for _, c := range []struct{ remote, clientIP, want string }{
		{"192.0.2.1:5555", "", "192.0.2.1/32"},
		{"192.0.2.1:5555", "198.51.100.7", "198.51.100.7/32"},
		{"[2001:db8:1:2:3::4]:443", "", "2001:db8:1:2::/64"},
		{"@", "", ""},
	} {
		r := httptest.NewRequest("GET", "http://h/", nil)
		r.RemoteAddr = c.remote
		ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
		if c.clientIP != "" {
			caddyhttp.SetVar(ctx, caddyhttp.ClientIPVarKey, c.clientIP)
		}
		client, ok := clients.From(holdContext(r.WithContext(ctx)))
		if got := map[bool]string{true: client.String(), false: ""}[ok]; got != c.want {
			t.Errorf("remote %s, client_ip %q: client %q, want %q", c.remote, c.clientIP, got, c.want)
		}
	}
}
