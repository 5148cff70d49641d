package engine

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// TestCaddy_R2a_wildcard_route_and_exact_takeover: through Caddy, a
// wildcard instance serves the names under it, and an instance that lists
// one of them exactly takes that name over, without a reload.
func TestCaddy_R2a_wildcard_route_and_exact_takeover(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "wild", "127.0.0.121", map[string]string{"caddy.host": "*.example.com"})
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

	d.HelloInstance(t, "bee", "127.0.0.122", map[string]string{"caddy.host": "b.example.com"})
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
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "shop", "127.0.0.123", map[string]string{"caddy.host": "shop.example.com", "tenant": "trusted"})
	d.HelloInstance(t, "outside", "127.0.0.124", map[string]string{"caddy.host": "shop.example.net", "tenant": "trusted"})
	d.HelloInstance(t, "evil", "127.0.0.125", map[string]string{"caddy.host": "evil.example.com"})
	d.HelloInstance(t, "wild", "127.0.0.126", map[string]string{"caddy.host": "*.w.example.com", "tenant": "trusted"})
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

// TestCaddy_R2b_trailing_dot_does_not_bypass_a_protected_site: a site
// with basic_auth for internal.example.com next to a catch-all site, both
// routing by caddy.host. A Host that Caddy's site does not match
// (a trailing dot, two, a dot and a port) goes to the catch-all, which
// must not serve the protected instance: 503, never its 200.
func TestCaddy_R2b_trailing_dot_does_not_bypass_a_protected_site(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "internal", "127.0.0.127", map[string]string{"caddy.host": "internal.example.com"})
	d.HelloInstance(t, "public", "127.0.0.128", map[string]string{"caddy.host": "public.example.com"})
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
