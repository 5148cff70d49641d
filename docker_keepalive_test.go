package caddydicer

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// R5 and Caddy's keep-alive on Docker: a paused container freezes the
// connections Caddy keeps alive to it, as a Dicer guest on standby does.
// After each pause and unpause, requests are answered at once, and Caddy
// dials the container under a new spelling of its address, so no
// connection opened before the pause is used again; between pauses the
// spelling stays and keep-alive works as usual.
func TestDocker_R5_no_connection_kept_alive_across_a_pause(t *testing.T) {
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
	first, _ := answersWithin(t, tester, host, http.StatusOK, hello("r5-keep"), waitFor)
	want := netip.MustParseAddrPort(net.JoinHostPort(containerIP(t, cli, c, ""), "8080"))
	if !sameDial(first.upstream, want.String()) {
		t.Fatalf("a container never paused is dialled at %q, which is not %s", first.upstream, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dialled := map[string]bool{first.upstream: true}
	for round := 1; round <= 3; round++ {
		mustGet(t, tester, host, http.StatusOK, hello("r5-keep"))
		if err := cli.ContainerPause(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		answersWithin(t, tester, host, http.StatusServiceUnavailable, "", waitFor)
		if err := cli.ContainerUnpause(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		r, took := answersWithin(t, tester, host, http.StatusOK, hello("r5-keep"), waitFor)
		t.Logf("round %d: answered 200 %s after the unpause call, dialled %s", round, took.Round(time.Millisecond), r.upstream)
		ap, err := netip.ParseAddrPort(r.upstream)
		if err != nil || netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) != want {
			t.Fatalf("round %d: dialled %q, which is not %s", round, r.upstream, want)
		}
		if dialled[r.upstream] {
			t.Fatalf("round %d: dialled %q again after a pause: a connection kept alive from before could be reused", round, r.upstream)
		}
		dialled[r.upstream] = true
		for range 3 {
			if again := mustGet(t, tester, host, http.StatusOK, hello("r5-keep")); again.upstream != r.upstream {
				t.Fatalf("round %d: dialled %q, then %q with no pause in between", round, r.upstream, again.upstream)
			}
		}
	}
}
