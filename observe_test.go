package caddydicer

// Seeing inside through a real Caddy (issue 11): the metrics scraped from
// the admin endpoint move with events, re-listings, wakes, permission
// decisions and requests that found no upstream; the admin routes and the
// `caddy dicer` command give each verdict; no output of ours holds a
// token.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// adminGet GETs path from the in-process Caddy's admin endpoint.
func adminGet(t *testing.T, path string) string {
	t.Helper()
	res, err := http.Get(fmt.Sprintf("http://localhost:%d%s", adminPort, path))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	return string(body)
}

// adminJSON GETs path and decodes it into v.
func adminJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(adminGet(t, path)), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// metric is the value of the sample of name whose labels include every
// one of labels (`key="value"`), summed over the samples that match; 0 if
// none does.
func metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(adminGet(t, "/metrics")))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// metricGrows waits until metric(name, labels) exceeds before.
func metricGrows(t *testing.T, before float64, name string, labels ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s%v grows from %v", name, labels, before), func() bool {
		return metric(t, name, labels...) > before
	})
}

// cli runs `caddy dicer args...` against the in-process Caddy's admin
// endpoint, as the caddy binary would, and returns what it printed.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	def, ok := caddycmd.Commands()["dicer"]
	if !ok {
		t.Fatal("caddy dicer is not registered")
	}
	cmd := &cobra.Command{Use: "dicer"}
	def.CobraFunc(cmd)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append(args, "--address", fmt.Sprintf("localhost:%d", adminPort)))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("caddy dicer %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// helloOn starts a hello server for name on a free port of ip and returns
// the port.
func helloOn(t *testing.T, ip, name string) int {
	t.Helper()
	addr, stop, err := dicertest.ListenHello(ip+":0", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port
}

// observedSites are a selector route for web.test and a route by caddy.host
// for every other host, on the daemon at sock, with published ports
// reached at 127.0.0.1 and the given extra settings.
func observedSites(sock, extra string) string {
	daemon := fmt.Sprintf("address unix:%s\n\t\t\tpublished_port_host 127.0.0.1\n\t\t\t%s", sock, extra)
	return fmt.Sprintf(`
http://web.test:%[1]d {
	reverse_proxy {
		dynamic dicer app=web {
			%[2]s
		}
	}
}

http://:%[1]d {
	reverse_proxy {
		dynamic dicer {
			%[2]s
		}
	}
}`, httpPort, daemon)
}

func TestCaddy_observe_metrics_move(t *testing.T) {
	needsCaddy(t)
	d, sock := testDaemon(t)
	instance(t, d, "web-1", "127.0.0.111", map[string]string{"app": "web"})
	instance(t, d, "shop", "127.0.0.112", map[string]string{"caddy.host": "shop.test"})
	// On standby, its guest port published on every host address: a
	// request wakes it (R5), here a hello server in its place.
	d.CreateInstance(&dicerpb.Instance{
		Name: "sleepy", Ip: "127.0.0.113", NetworkName: "default",
		Labels:       map[string]string{"caddy.host": "sleepy.test", "caddy.port": "8080"},
		State:        dicerpb.InstanceState_INSTANCE_STATE_STANDBY,
		StandbyAfter: durationpb.New(time.Minute),
		Ports:        []*dicerpb.PortMapping{{HostPort: uint32(helloOn(t, "127.0.0.1", "sleepy")), GuestPort: 8080}},
	})
	config, _ := caddyConfig(t, fmt.Sprintf(`
on_demand_tls {
	permission dicer {
		address unix:%s
		published_port_host 127.0.0.1
	}
}`, sock), observedSites(sock, "")+`

https:// {
	tls internal {
		on_demand
	}
	respond "tls"
}`)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	daemon := `daemon="unix:` + sock + `"`
	answers(t, tester, "web.test", http.StatusOK, hello("web-1"))

	if v := metric(t, "caddy_dicer_connected", daemon); v != 1 {
		t.Errorf("caddy_dicer_connected = %v, want 1", v)
	}
	if v := metric(t, "caddy_dicer_instances", daemon, `state="running"`); v != 2 {
		t.Errorf("instances running = %v, want 2", v)
	}
	if v := metric(t, "caddy_dicer_instances", daemon, `state="standby"`); v != 1 {
		t.Errorf("instances on standby = %v, want 1", v)
	}
	if v := metric(t, "caddy_dicer_routable_instances", daemon); v != 2 {
		t.Errorf("routable instances = %v, want 2", v)
	}

	t.Run("requests_that_found_no_upstream_per_route", func(t *testing.T) {
		route := `route="caddy.host"`
		before := metric(t, "caddy_dicer_no_upstream_total", daemon, route)
		if status, _ := get(t, tester, "nobody.test"); status != http.StatusServiceUnavailable {
			t.Fatalf("unclaimed host: %d, want 503", status)
		}
		if v := metric(t, "caddy_dicer_no_upstream_total", daemon, route); v != before+1 {
			t.Errorf("no_upstream on the caddy.host route: %v, want %v", v, before+1)
		}
		if v := metric(t, "caddy_dicer_no_upstream_total", daemon, `route="app=web"`); v != 0 {
			t.Errorf("no_upstream on the app=web route: %v, want 0", v)
		}
	})

	t.Run("wakes", func(t *testing.T) {
		before := metric(t, "caddy_dicer_wakes_total", daemon, `result="requested"`)
		answers(t, tester, "sleepy.test", http.StatusOK, hello("sleepy"))
		if v := metric(t, "caddy_dicer_wakes_total", daemon, `result="requested"`); v < before+1 {
			t.Errorf("wakes requested: %v, want at least %v", v, before+1)
		}
	})

	t.Run("permission_decisions", func(t *testing.T) {
		allowed := metric(t, "caddy_dicer_permission_decisions_total", daemon, `decision="allowed"`)
		denied := metric(t, "caddy_dicer_permission_decisions_total", daemon, `decision="denied"`)
		if err := tlsHandshake("shop.test"); err != nil {
			t.Fatalf("claimed host: %v", err)
		}
		if err := tlsHandshake("evil.test"); err == nil {
			t.Fatal("unclaimed host got a certificate")
		}
		metricGrows(t, allowed, "caddy_dicer_permission_decisions_total", daemon, `decision="allowed"`)
		metricGrows(t, denied, "caddy_dicer_permission_decisions_total", daemon, `decision="denied"`)
	})

	t.Run("events", func(t *testing.T) {
		received := metric(t, "caddy_dicer_events_received_total", daemon)
		applied := metric(t, "caddy_dicer_events_applied_total", daemon)
		latencies := metric(t, "caddy_dicer_event_to_catalog_seconds_count", daemon)
		d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil)
		answers(t, tester, "web.test", http.StatusServiceUnavailable, "")
		metricGrows(t, received, "caddy_dicer_events_received_total", daemon)
		metricGrows(t, applied, "caddy_dicer_events_applied_total", daemon)
		metricGrows(t, latencies, "caddy_dicer_event_to_catalog_seconds_count", daemon)
		if v := metric(t, "caddy_dicer_instances", daemon, `state="paused"`); v != 1 {
			t.Errorf("instances paused = %v, want 1", v)
		}
		d.SetState("web-1", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
		answers(t, tester, "web.test", http.StatusOK, hello("web-1"))
	})

	t.Run("relists_and_daemon_state", func(t *testing.T) {
		before := metric(t, "caddy_dicer_relists_total", daemon)
		d.Stop()
		eventually(t, "the daemon's state is reconnecting", func() bool {
			var list []DaemonStatus
			adminJSON(t, "/dicer/daemons", &list)
			return len(list) == 1 && list[0].State == stateReconnecting && list[0].LastError != ""
		})
		if v := metric(t, "caddy_dicer_connected", daemon); v != 0 {
			t.Errorf("caddy_dicer_connected while the daemon is down = %v, want 0", v)
		}
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
		metricGrows(t, before, "caddy_dicer_relists_total", daemon)
		eventually(t, "the daemon is followed again, with one re-listing", func() bool {
			var list []DaemonStatus
			adminJSON(t, "/dicer/daemons", &list)
			return len(list) == 1 && list[0].State == stateFollowing && list[0].Relists == 1
		})
		if v := metric(t, "caddy_dicer_connected", daemon); v != 1 {
			t.Errorf("caddy_dicer_connected after the re-listing = %v, want 1", v)
		}
	})
}
