package engine

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R5a on Docker: a paused container freezes the connections Caddy keeps
// alive to it, as a Dicer guest on standby does. After each pause and
// unpause, requests are answered at once, and Caddy dials the container at
// its real address, which {http.reverse_proxy.upstream.hostport} shows:
// the connections from before the pause are closed, the address is not
// disguised.
func TestDocker_R5a_keep_alive_across_a_pause_at_the_real_address(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r5-keep")
	host := hostName("r5-keep")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		%s
	}
}`, httpPort, app, upstreamHeader))
	c := dockertest.Start(t, cli, dockertest.Options{Name: "r5-keep", Labels: map[string]string{"app": app}})
	// The first dial address is the container's: its IP as it is, or
	// spelt apart if an earlier test's container had that IP on this
	// shared connection (R1d). A pause must not change it.
	ip := containerIP(t, cli, c, "")
	first, _ := answersWithin(t, tester, host, http.StatusOK, hello("r5-keep"), waitFor)
	want := first.upstream
	if h, port, err := net.SplitHostPort(want); err != nil || port != "8080" || netip.MustParseAddr(ip) != unmapped(h) {
		t.Fatalf("a container never paused is dialled at %q, want %s:8080 (or, R1d, a spelling of it)", want, ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds = 5
	var took []time.Duration
	for round := 1; round <= rounds; round++ {
		mustGet(t, tester, host, http.StatusOK, hello("r5-keep")) // a connection kept alive
		if err := cli.ContainerPause(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		answersWithin(t, tester, host, http.StatusServiceUnavailable, "", waitFor)
		if err := cli.ContainerUnpause(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		r, d := answersWithin(t, tester, host, http.StatusOK, hello("r5-keep"), waitFor)
		t.Logf("round %d: answered 200 %s after the unpause call, dialled %s", round, d.Round(time.Millisecond), r.upstream)
		took = append(took, d)
		if r.upstream != want {
			t.Fatalf("round %d: dialled %q after a pause, want the real address %s", round, r.upstream, want)
		}
		for range 3 {
			if again := mustGet(t, tester, host, http.StatusOK, hello("r5-keep")); again.upstream != want {
				t.Fatalf("round %d: dialled %q, want %s", round, again.upstream, want)
			}
		}
	}
	slices.Sort(took)
	t.Logf("first 200 after the unpause call, over %d rounds: median %s, max %s", rounds,
		took[len(took)/2].Round(100*time.Microsecond), took[len(took)-1].Round(100*time.Microsecond))
}

// R5a and lb_policy cookie: the cookie names an upstream by a hash of its
// dial address, so a client keeps going to the same container after that
// container is paused and unpaused, without being given a new cookie.
func TestDocker_R5a_cookie_affinity_survives_a_pause(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r5a-aff")
	host := hostName("r5a-aff")
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy cookie
		%s
	}
}`, httpPort, app, upstreamHeader))
	containers := map[string]dockertest.Container{}
	for _, n := range []string{"r5a-aff-a", "r5a-aff-b"} {
		containers[hello(n)] = dockertest.Start(t, cli, dockertest.Options{Name: n, Labels: map[string]string{"app": app}})
	}
	for _, c := range containers {
		awaitRoutable(t, app, c, true)
	}
	first, cookie := getWithCookie(t, tester, host, nil)
	sticky, ok := containers[first.body]
	if first.status != http.StatusOK || !ok || cookie == nil {
		t.Fatalf("first request: %s, cookie %v; want 200 from one of the two and a cookie", first, cookie)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := 1; round <= 3; round++ {
		if err := cli.ContainerPause(ctx, sticky.ID); err != nil {
			t.Fatal(err)
		}
		awaitRoutable(t, app, sticky, false)
		if err := cli.ContainerUnpause(ctx, sticky.ID); err != nil {
			t.Fatal(err)
		}
		awaitRoutable(t, app, sticky, true)
		for i := range 3 {
			r, renewed := getWithCookie(t, tester, host, cookie)
			if r.status != http.StatusOK || r.body != first.body || renewed != nil {
				t.Fatalf("round %d, request %d with the cookie after %s was paused and unpaused: %s, new cookie %v; want 200 %q and no new cookie",
					round, i+1, sticky.Name, r, renewed, first.body)
			}
		}
	}
}

// awaitRoutable waits until Caddy's catalog shows c, of app, routable or
// not.
func awaitRoutable(t *testing.T, app string, c dockertest.Container, routable bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s routable: %v", c.Name, routable), func() bool {
		var list []diceradmin.InstanceStatus
		adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
		for _, in := range list {
			if in.Name == c.Name {
				return in.Routable == routable
			}
		}
		return false
	})
}

// getWithCookie sends GET / for host to Caddy with cookie (nil: none) and
// returns the answer and the cookie it sets for lb_policy cookie (named
// lb), nil if it sets none.
func getWithCookie(t *testing.T, tester *caddytest.Tester, host string, cookie *http.Cookie) (reply, *http.Cookie) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if cookie != nil {
		req.AddCookie(cookie)
	}
	res, err := tester.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var set *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "lb" {
			set = c
		}
	}
	return reply{status: res.StatusCode, body: string(body), upstream: res.Header.Get("X-Upstream")}, set
}

// unmapped is the IP a dial host spells (an IPv4-mapped IPv6 spelling is
// its IPv4 address); the zero Addr if it is not an IP.
func unmapped(host string) netip.Addr {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
