package engine

// Seeing inside through a real Caddy (issue 11): the metrics scraped from
// the admin endpoint move with events, re-listings, wakes, permission
// decisions and requests that found no upstream; the admin routes and the
// `caddy dicer` command give each verdict; no output of ours holds a
// token.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/docker/docker/api/types/container"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// adminGet GETs path from the in-process Caddy's admin endpoint.
func adminGet(t *testing.T, path string) string {
	t.Helper()
	return testkit.AdminGet(t, fmt.Sprintf("localhost:%d", adminPort), path)
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
	return testkit.MetricSum(t, adminGet(t, "/metrics"), name, labels...)
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
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.111", map[string]string{"app": "web"})
	// A host Caddy has no certificate for yet, in a repetition too: it
	// asks the permission (fresh).
	shop := fresh("shop.test")
	d.HelloInstance(t, "shop", "127.0.0.112", map[string]string{"caddy.host": shop})
	// On standby, its guest port published on every host address: a
	// request wakes it (R5), here a hello server in its place.
	d.CreateInstance(&dicerpb.Instance{
		Name: "sleepy", Ip: "127.0.0.113", NetworkName: "default",
		Labels:       map[string]string{"caddy.host": "sleepy.test", "caddy.port": "8080"},
		State:        dicerpb.InstanceState_INSTANCE_STATE_STANDBY,
		StandbyAfter: durationpb.New(time.Minute),
		Ports:        []*dicerpb.PortMapping{{HostPort: uint32(dicertest.HelloPort(t, "127.0.0.1", "sleepy")), GuestPort: 8080}},
	})
	tester, _ := startCaddy(t, fmt.Sprintf(`
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
	// web-1 and shop, without a health check, were probed (R1a).
	if v := metric(t, "caddy_dicer_readiness_probes_total", daemon, `result="accepted"`); v < 2 {
		t.Errorf("readiness probes accepted = %v, want at least 2", v)
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
		if err := tlsHandshake(shop); err != nil {
			t.Fatalf("claimed host: %v", err)
		}
		if err := tlsHandshake("evil.test"); err == nil {
			t.Fatal("unclaimed host got a certificate")
		}
		metricGrows(t, allowed, "caddy_dicer_permission_decisions_total", daemon, `decision="allowed"`)
		metricGrows(t, denied, "caddy_dicer_permission_decisions_total", daemon, `decision="denied"`)

		// The admin API's explain says the same, and counts nothing.
		for host, want := range map[string]bool{shop: true, "evil.test": false} {
			var e diceradmin.Explanation
			adminJSON(t, "/dicer/explain?host="+host, &e)
			if len(e.Certificates) != 1 || e.Certificates[0].Allowed != want || e.Certificates[0].Why == "" {
				t.Errorf("explain %s: certificates %+v, want one, allowed=%v, with why", host, e.Certificates, want)
			}
		}
		if out := cli(t, "explain", "evil.test"); !strings.Contains(out, "certificate for evil.test (permission dicer unix:"+sock+"): refused, no instance lists") {
			t.Errorf("caddy dicer explain evil.test:\n%s", out)
		}
		allowedNow := metric(t, "caddy_dicer_permission_decisions_total", daemon, `decision="allowed"`)
		adminGet(t, "/dicer/explain?host="+shop)
		if v := metric(t, "caddy_dicer_permission_decisions_total", daemon, `decision="allowed"`); v != allowedNow {
			t.Errorf("an explain counted a permission decision: %v, was %v", v, allowedNow)
		}
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
			var list []diceradmin.DaemonStatus
			adminJSON(t, "/dicer/daemons", &list)
			return len(list) == 1 && list[0].State == connection.StateReconnecting && list[0].LastError != ""
		})
		if v := metric(t, "caddy_dicer_connected", daemon); v != 0 {
			t.Errorf("caddy_dicer_connected while the daemon is down = %v, want 0", v)
		}
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
		metricGrows(t, before, "caddy_dicer_relists_total", daemon)
		eventually(t, "the daemon is followed again, with one re-listing", func() bool {
			var list []diceradmin.DaemonStatus
			adminJSON(t, "/dicer/daemons", &list)
			return len(list) == 1 && list[0].State == connection.StateFollowing && list[0].Relists == 1 && list[0].LastRelistCause != ""
		})
		if v := metric(t, "caddy_dicer_connected", daemon); v != 1 {
			t.Errorf("caddy_dicer_connected after the re-listing = %v, want 1", v)
		}
	})
}

func TestCaddy_observe_verdicts_admin_and_cli(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "ok", "127.0.0.121", map[string]string{"app": "web"})
	d.HelloInstance(t, "other", "127.0.0.122", map[string]string{"app": "web", "caddy.host": "other.test"})
	sick := d.HelloInstance(t, "sick", "127.0.0.123", map[string]string{"app": "web"})
	d.UpdateInstance(sick.GetName(), func(i *dicerpb.Instance) {
		i.HealthCheck = &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Tcp{Tcp: &dicerpb.HealthCheckTCP{Port: 1}}}
		i.Health = &dicerpb.Health{Status: dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY}
	})
	running := func(name, ip string, labels map[string]string) {
		d.CreateInstance(&dicerpb.Instance{Name: name, Ip: ip, NetworkName: "default", Labels: labels,
			State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING})
	}
	running("badport", "127.0.0.124", map[string]string{"app": "web", "caddy.port": "abc"})
	running("noport", "127.0.0.125", map[string]string{"caddy.host": "noport.test"})
	// Its port refuses, and readiness_timeout keeps it out (R1a).
	closed, err := net.Listen("tcp", "127.0.0.126:0")
	if err != nil {
		t.Fatal(err)
	}
	_, refusing, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()
	running("notready", "127.0.0.126", map[string]string{"app": "web", "caddy.port": refusing})
	d.CreateInstance(&dicerpb.Instance{
		Name: "asleep", Ip: "127.0.0.127", NetworkName: "default",
		Labels: map[string]string{"app": "web", "caddy.port": "8080"},
		State:  dicerpb.InstanceState_INSTANCE_STATE_STANDBY, StandbyAfter: durationpb.New(time.Minute),
	})
	tester, logFile := startCaddy(t, "", observedSites(sock, "readiness_timeout 1m"))
	answers(t, tester, "web.test", http.StatusOK, hello("ok"))

	want := map[string]string{
		"ok":       "routable",
		"other":    "routable",
		"sick":     "unhealthy",
		"badport":  `caddy.port "abc" is not a port`,
		"noport":   "no port: publishes none and the route sets none",
		"notready": "not ready: port " + refusing + " refuses",
		"asleep":   "on standby",
	}
	t.Run("admin_instances", func(t *testing.T) {
		var list []diceradmin.InstanceStatus
		adminJSON(t, "/dicer/instances", &list)
		got := map[string]string{}
		for _, in := range list {
			got[in.Name] = in.Verdict
			if in.Kind != "dicer" || in.Daemon != "unix:"+sock {
				t.Errorf("%s: kind %q daemon %q", in.Name, in.Kind, in.Daemon)
			}
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: verdict %q, want %q", name, got[name], w)
			}
		}
		adminJSON(t, "/dicer/instances?selector=app%3Dweb", &list)
		for _, in := range list {
			if in.Name == "noport" {
				t.Error("selector app=web lists noport")
			}
		}
		if len(list) != len(want)-1 {
			t.Errorf("selector app=web: %d instances, want %d", len(list), len(want)-1)
		}
	})

	t.Run("cli_instances", func(t *testing.T) {
		out := cli(t, "instances")
		for name, w := range want {
			if !strings.Contains(out, " "+name+" ") || !strings.Contains(out, w) {
				t.Errorf("caddy dicer instances: no line for %s with %q:\n%s", name, w, out)
			}
		}
		if out := cli(t, "instances", "--selector", "app=web"); strings.Contains(out, "noport") {
			t.Errorf("caddy dicer instances --selector app=web lists noport:\n%s", out)
		}
		var list []diceradmin.InstanceStatus
		if err := json.Unmarshal([]byte(cli(t, "instances", "--json")), &list); err != nil || len(list) != len(want) {
			t.Errorf("caddy dicer instances --json: %d instances, %v", len(list), err)
		}
	})

	t.Run("admin_explain", func(t *testing.T) {
		var e diceradmin.Explanation
		adminJSON(t, "/dicer/explain?host=WEB.test:9080", &e)
		if e.Host != "web.test" || len(e.Routes) != 2 {
			t.Fatalf("explain: host %q, %d routes, want web.test and 2", e.Host, len(e.Routes))
		}
		byRoute := map[string]diceradmin.RouteExplanation{}
		for _, r := range e.Routes {
			byRoute[r.Route] = r
		}
		sel := byRoute["app=web"]
		if len(sel.Targets) != 1 || !strings.HasPrefix(sel.Targets[0], "ok 127.0.0.121:") {
			t.Errorf("app=web targets %q, want ok alone", sel.Targets)
		}
		why := map[string]string{}
		for _, c := range sel.Candidates {
			why[c.Instance] = c.Why
		}
		for name, w := range map[string]string{
			"ok": "routable", "other": "caddy.host lists only other hosts: other.test", "sick": "unhealthy",
			"badport": want["badport"], "notready": want["notready"], "asleep": "on standby",
		} {
			if why[name] != w {
				t.Errorf("explain app=web, %s: %q, want %q", name, why[name], w)
			}
		}
		if r := byRoute["caddy.host"]; len(r.Targets) != 0 || len(r.Candidates) != 0 {
			t.Errorf("caddy.host route for web.test: %+v, want nothing", r)
		}
	})

	t.Run("cli_explain_and_daemons", func(t *testing.T) {
		out := cli(t, "explain", "web.test")
		for _, w := range []string{"route app=web", "1 target(s): ok 127.0.0.121:", "caddy.host lists only other hosts: other.test",
			"route caddy.host", "no upstream: 503"} {
			if !strings.Contains(out, w) {
				t.Errorf("caddy dicer explain web.test lacks %q:\n%s", w, out)
			}
		}
		out = cli(t, "explain", "noport.test")
		if !strings.Contains(out, "no port: publishes none and the route sets none") {
			t.Errorf("caddy dicer explain noport.test:\n%s", out)
		}
		out = cli(t, "daemons")
		if !strings.Contains(out, "unix:"+sock) || !strings.Contains(out, "following") {
			t.Errorf("caddy dicer daemons:\n%s", out)
		}
	})

	t.Run("log_says_it_once", func(t *testing.T) {
		for what, parts := range map[string][]string{
			"bad port":                {`"level":"warn"`, `"instance":"badport"`, "not a port"},
			"no port":                 {`"level":"warn"`, `"instance":"noport"`, "no port: publishes none"},
			"caddy.host on selector":  {`"level":"warn"`, `"instance":"other"`, "on a selector route"},
			"unhealthy from start":    {`"instance stays out of rotation"`, `"instance":"sick"`},
			"a route's selector only": {`"instance joins rotation"`, `"instance":"ok"`},
		} {
			if n := len(testkit.LogLines(t, logFile, parts...)); n != 1 {
				t.Errorf("%s: %d log lines with %q, want 1", what, n, parts)
			}
		}
		for _, name := range []string{"badport", "noport", "sick", "notready", "asleep"} {
			if lines := testkit.LogLines(t, logFile, `"instance joins rotation"`, `"instance":"`+name+`"`); len(lines) != 0 {
				t.Errorf("%s, which gets no requests, logged as joining: %q", name, lines)
			}
		}
	})
}

func TestCaddy_observe_no_token_in_outputs(t *testing.T) {
	needsCaddy(t)
	d := dicertest.New()
	defer d.Close()
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.HelloInstance(t, "web-1", "127.0.0.131", map[string]string{"app": "web", "caddy.host": "web.test"})
	token := d.AddToken("caddy", "instances:read", "events:read", "networks:read")
	// A token the daemon does not know, with the right fingerprint: a
	// connection refused, whose error is shown.
	unknown := "dicer_" + strings.Repeat("a", 52) + token[strings.LastIndexByte(token, '_'):]
	t.Setenv("TEST_DICER_TOKEN", token)
	tester, logFile := startCaddy(t, fmt.Sprintf(`
on_demand_tls {
	permission dicer {
		address %[1]s
		token {env.TEST_DICER_TOKEN}
	}
}`, addr), fmt.Sprintf(`
http://web.test:%[2]d {
	reverse_proxy {
		dynamic dicer app=web {
			address %[1]s
			token {env.TEST_DICER_TOKEN}
		}
	}
}

http://:%[2]d {
	reverse_proxy {
		dynamic dicer {
			address %[1]s
			token %[3]s
		}
	}
}`, addr, httpPort, unknown))
	answers(t, tester, "web.test", http.StatusOK, hello("web-1"))
	eventually(t, "the unknown token's connection shows its error", func() bool {
		var list []diceradmin.DaemonStatus
		adminJSON(t, "/dicer/daemons", &list)
		for _, d := range list {
			if d.LastError != "" {
				return true
			}
		}
		return false
	})
	get(t, tester, "other.test")

	outputs := map[string]string{
		"/metrics":           adminGet(t, "/metrics"),
		"/dicer/daemons":     adminGet(t, "/dicer/daemons"),
		"/dicer/instances":   adminGet(t, "/dicer/instances"),
		"/dicer/explain":     adminGet(t, "/dicer/explain?host=web.test"),
		"caddy dicer daemon": cli(t, "daemons"),
		"caddy dicer inst":   cli(t, "instances"),
		"caddy dicer expl":   cli(t, "explain", "web.test"),
		"log":                testkit.ReadFile(t, logFile),
	}
	if !strings.Contains(outputs["/dicer/daemons"], addr) {
		t.Fatalf("/dicer/daemons does not name the daemon %s:\n%s", addr, outputs["/dicer/daemons"])
	}
	for what, out := range outputs {
		for _, secret := range []string{token[6:58], unknown[6:58]} {
			if strings.Contains(out, secret) {
				t.Errorf("%s holds a token's secret", what)
			}
		}
	}
}

// The same against the real Docker Engine: a container on two networks and
// no choice, one unhealthy from its start, and one no route or permission
// could use, in the admin API, the CLI, the log and the metrics.
func TestDocker_observe_verdicts_and_logs(t *testing.T) {
	engineCli := engine(t)
	netA := dockertest.CreateNetwork(t, engineCli, "obs-a")
	netB := dockertest.CreateNetwork(t, engineCli, "obs-b")
	app := dockertest.Name("obs")
	host := hostName("obs")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
http://%[1]s:%[2]d {
	reverse_proxy {
		dynamic docker app=%[3]s 8080
	}
}`, host, httpPort, app))

	ambiguous := dockertest.Start(t, engineCli, dockertest.Options{
		Name: "obs-ambiguous", Network: netA, Networks: []string{netB},
		Labels: map[string]string{"app": app},
	})
	sick := dockertest.Start(t, engineCli, dockertest.Options{
		Name: "obs-sick", Labels: map[string]string{"app": app}, Env: []string{"HEALTH=bad"},
		Health: dockertest.HealthCheck(200*time.Millisecond, 0),
	})
	unused := dockertest.Start(t, engineCli, dockertest.Options{Name: "obs-unused", Labels: map[string]string{"app": app + "-none"}})
	waitHealth(t, engineCli, sick, container.Unhealthy)
	mustGet(t, tester, host, http.StatusServiceUnavailable, "")

	verdicts := func() map[string]string {
		var list []diceradmin.InstanceStatus
		adminJSON(t, "/dicer/instances?selector=app%3D"+app, &list)
		out := map[string]string{}
		for _, in := range list {
			if in.Kind != "docker" {
				t.Errorf("%s: kind %q, want docker", in.Name, in.Kind)
			}
			out[in.Name] = in.Verdict
		}
		return out
	}
	eventually(t, sick.Name+" is unhealthy in /dicer/instances", func() bool { return verdicts()[sick.Name] == "unhealthy" })
	got := verdicts()
	if v := got[ambiguous.Name]; v != "on networks "+netA+" and "+netB+", none chosen" && v != "on networks "+netB+" and "+netA+", none chosen" {
		t.Errorf("%s: verdict %q, want on networks %s and %s, none chosen", ambiguous.Name, v, netA, netB)
	}
	if out := cli(t, "instances", "--selector", "app="+app); !strings.Contains(out, ", none chosen") || !strings.Contains(out, "unhealthy") {
		t.Errorf("caddy dicer instances --selector app=%s:\n%s", app, out)
	}
	if out := cli(t, "explain", host); !strings.Contains(out, "no upstream: 503") || !strings.Contains(out, sick.Name) {
		t.Errorf("caddy dicer explain %s:\n%s", host, out)
	}

	if n := len(testkit.LogLines(t, logFile, `"instance stays out of rotation"`, `"instance":"`+sick.Name+`"`, `"why":"unhealthy"`)); n != 1 {
		t.Errorf("%d lines say %s stays out of rotation, want 1", n, sick.Name)
	}
	eventually(t, "a debug line names "+unused.Name, func() bool {
		return len(testkit.LogLines(t, logFile, `"instance":"`+unused.Name+`"`)) > 0
	})
	for _, line := range testkit.LogLines(t, logFile, `"instance":"`+unused.Name+`"`) {
		if !strings.Contains(line, `"level":"debug"`) {
			t.Errorf("a container no route or permission could use is logged above debug level: %s", line)
		}
	}
	if v := metric(t, "caddy_dicer_connected", `kind="docker"`); v < 1 {
		t.Errorf("caddy_dicer_connected{kind=docker} = %v, want 1", v)
	}
	if v := metric(t, "caddy_dicer_events_applied_total", `kind="docker"`); v < 3 {
		t.Errorf("caddy_dicer_events_applied_total{kind=docker} = %v, want at least one per container started", v)
	}
}
