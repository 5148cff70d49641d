//go:build e2e && linux

package e2e

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// The layer-4 handler `dicer_proxy` (R14) on Dicer: TCP connections to the
// host's instances through caddy-l4's layer4 app (the e2e Caddy is built
// with caddy-l4 and this checkout's layer4 package).

// layer4Globals is a `layer4` global option with one route on addr to the
// instances selector matches on the host's daemon.
func layer4Globals(h dicerHost, addr, selector string) string {
	return fmt.Sprintf(`layer4 {
	%s {
		route {
			dicer_proxy dicer %s %d {
%s
			}
		}
	}
}`, addr, strconv.Quote(h.selector(selector)), guestPort, indent(indent(indent(indent(h.settings())))))
}

// tcpHello sends one HTTP request over a new TCP connection to addr and
// returns the whole answer.
func tcpHello(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: l4.test\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestE2E_R14_dicer_connections_rotate_and_wake_from_standby(t *testing.T) {
	h := newHost(t)
	a := h.run(t, instance{name: "l4a", labels: map[string]string{"app": "l4"}, publish: true, standbyAfter: time.Minute})
	b := h.run(t, instance{name: "l4b", labels: map[string]string{"app": "l4"}, publish: true, standbyAfter: time.Minute})
	addr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	startCaddy(t, layer4Globals(h, addr, "app=l4"), "")
	seen := map[string]int{}
	for range 20 {
		body, err := tcpHello(addr)
		if err != nil {
			t.Fatalf("a connection through dicer_proxy: %v", err)
		}
		for _, n := range []string{a, b} {
			if strings.HasSuffix(body, hello(n)) {
				seen[n]++
			}
		}
	}
	if seen[a] != 10 || seen[b] != 10 {
		t.Errorf("20 connections answered %v, want 10 by each of %s and %s in rotation", seen, a, b)
	}

	// On standby, the next connection goes to it and Dicer wakes it: the
	// connection is answered, not reset.
	h.standby(t, a)
	h.standby(t, b)
	body, err := tcpHello(addr)
	if err != nil || !(strings.HasSuffix(body, hello(a)) || strings.HasSuffix(body, hello(b))) {
		t.Fatalf("the connection to instances on standby: %v %q", err, body)
	}
	woken := 0
	for _, n := range []string{a, b} {
		if h.state(t, n) == dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
			woken++
		}
	}
	if woken != 1 {
		t.Errorf("%d instances woken by one connection, want 1", woken)
	}
}
