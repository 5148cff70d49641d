//go:build e2e && linux

package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// Each scenario builds its own Dicer host and Caddy and tears both down
// when it ends. Conditions are polled with a deadline (within), never slept
// on.

// within bounds every wait for a condition.
const within = 20 * time.Second

const (
	joins  = "instance joins rotation"
	leaves = "instance leaves rotation"
)

func hello(name string) string { return dicertest.HelloBody(name) }

// eventually polls cond until it holds, failing t after within.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, within, what, cond)
}

// dynamic is the `dynamic dicer` block of a route, with the host's daemon
// settings; an empty selector and a zero port are left out.
func dynamic(h dicerHost, selector string, port int) string {
	args := ""
	if selector != "" {
		args += " " + strconv.Quote(h.selector(selector))
	}
	if port != 0 {
		args += " " + strconv.Itoa(port)
	}
	return fmt.Sprintf("dynamic dicer%s {\n%s\t\t}", args, indent(indent(indent(h.settings()))))
}

// proxySite is an http:// site for host that proxies to the instances
// selector matches, round robin.
func proxySite(h dicerHost, host, selector string, port int) string {
	return fmt.Sprintf(`
http://%s {
	reverse_proxy {
		%s
		lb_policy round_robin
	}
}
`, host, dynamic(h, selector, port))
}

// tally sends n requests for host one after another, requires each to be
// answered 200, and counts them by body.
func tally(t *testing.T, c *caddyProc, host string, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := range n {
		r := c.get(host)
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("%s request %d of %d: %v", host, i+1, n, r)
		}
		counts[r.body]++
	}
	return counts
}

// expectEven requires n requests for host to be shared evenly among the
// named instances and no one else.
func expectEven(t *testing.T, c *caddyProc, host string, perInstance int, names ...string) {
	t.Helper()
	got := tally(t, c, host, perInstance*len(names))
	want := map[string]int{}
	for _, n := range names {
		want[hello(n)] = perInstance
	}
	if !mapsEqual(got, want) {
		t.Fatalf("%s: %d requests answered %v; want %d from each of %v", host, perInstance*len(names), got, perInstance, names)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// awaitRotation runs change, then waits until Caddy logs msg (joins or
// leaves) for the instance once more than before, and returns the logged
// reason.
func awaitRotation(t *testing.T, c *caddyProc, msg, name string, change func()) string {
	t.Helper()
	fields := map[string]string{"instance": name}
	before := c.count(msg, fields)
	change()
	eventually(t, fmt.Sprintf("caddy logs %q for %s", msg, name), func() bool { return c.count(msg, fields) > before })
	why := ""
	for _, e := range c.logEntries() {
		if e["msg"] == msg && e["instance"] == name {
			why = fmt.Sprint(e["why"])
		}
	}
	return why
}

// dialled returns the addresses Caddy's reverse proxy dialled, in order
// (its "selected upstream" debug entries).
func dialled(c *caddyProc) []string {
	var out []string
	for _, e := range c.logEntries() {
		if e["msg"] == "selected upstream" {
			out = append(out, fmt.Sprint(e["dial"]))
		}
	}
	return out
}

// count returns how many times s occurs in list.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// secretOf returns the secret part of a Dicer token (dicer_<secret>_<fp>).
func secretOf(token string) string {
	secret, _, _ := strings.Cut(strings.TrimPrefix(token, "dicer_"), "_")
	return secret
}

// wokenEvents returns the STARTED events that record a wake by a
// connection.
func wokenEvents(evs []*dicerpb.Event) []*dicerpb.Event {
	var out []*dicerpb.Event
	for _, ev := range evs {
		if ev.GetAction() == dicerpb.EventAction_EVENT_ACTION_STARTED && ev.GetAttributes()["woken_by_port"] != "" {
			out = append(out, ev)
		}
	}
	return out
}

func TestE2E_modules_xcaddy_build_lists_dicer_modules(t *testing.T) {
	out, err := exec.Command(caddyBin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy list-modules: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	for _, m := range []string{"http.reverse_proxy.upstreams.dicer", "tls.permission.dicer"} {
		if !slices.Contains(lines, m) {
			t.Errorf("caddy list-modules lacks %s", m)
		}
	}
	version, err := exec.Command(caddyBin, "version").Output()
	if err != nil || !strings.HasPrefix(string(version), envOr("CADDY_VERSION", "v2.11.9")) {
		t.Errorf("caddy version: %q, %v", version, err)
	}
}

func TestE2E_R2_round_robin_shares_a_site_evenly(t *testing.T) {
	h := newHost(t)
	var web []string
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		web = append(web, h.run(t, instance{name: n, labels: map[string]string{"app": "web"}}))
	}
	c := startCaddy(t, "", proxySite(h, "web.test", "app=web", guestPort))

	expectEven(t, c, "web.test", 10, web...) // 30 requests, 10 each

	if s, ok := h.(*simHost); ok {
		// No published port: Caddy dials each instance's own address (R4).
		got := dialled(c)
		for _, n := range web {
			direct, _ := s.dials(t, n)
			if k := count(got, direct); k != 10 {
				t.Errorf("%s dialled %d times, want 10 (dialled: %v)", direct, k, got)
			}
		}
	}
}

func TestE2E_R2_single_instances_get_all_of_their_sites_requests(t *testing.T) {
	h := newHost(t)
	web1 := h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}})
	web2 := h.run(t, instance{name: "web-2", labels: map[string]string{"app": "web"}})
	// api-1 publishes its port and the route names none: requests go to the
	// only published port, through the host (R3, R4). admin-1 names its port
	// in caddy.port and publishes none: requests go to its own address.
	api := h.run(t, instance{name: "api-1", labels: map[string]string{"app": "api"}, publish: true})
	admin := h.run(t, instance{name: "admin-1", labels: map[string]string{"app": "admin", "caddy.port": strconv.Itoa(guestPort)}})
	c := startCaddy(t, "",
		proxySite(h, "web.test", "app=web", guestPort)+
			proxySite(h, "api.test", "app=api", 0)+
			proxySite(h, "admin.test", "app=admin", 0))

	expectEven(t, c, "api.test", 10, api)
	expectEven(t, c, "admin.test", 10, admin)
	expectEven(t, c, "web.test", 5, web1, web2)

	if s, ok := h.(*simHost); ok {
		got := dialled(c)
		_, apiPublished := s.dials(t, api)
		adminDirect, _ := s.dials(t, admin)
		if k := count(got, apiPublished); k != 10 {
			t.Errorf("api-1's published port %s dialled %d times, want 10 (dialled: %v)", apiPublished, k, got)
		}
		if k := count(got, adminDirect); k != 10 {
			t.Errorf("admin-1's address %s dialled %d times, want 10 (dialled: %v)", adminDirect, k, got)
		}
	}
}

func TestE2E_R5_selector_matching_nothing_answers_503(t *testing.T) {
	h := newHost(t)
	web := h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}})
	c := startCaddy(t, "",
		proxySite(h, "web.test", "app=web", guestPort)+
			proxySite(h, "none.test", "app=nothing", guestPort))

	// The daemon is connected: the other site is served.
	expectEven(t, c, "web.test", 3, web)
	for i := range 10 {
		if r := c.get("none.test"); r.err != nil || r.status != http.StatusServiceUnavailable {
			t.Fatalf("none.test request %d: %v, want 503", i+1, r)
		}
	}
}

func TestE2E_R6_instances_join_and_leave_without_a_reload(t *testing.T) {
	h := newHost(t)
	w1 := h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}})
	w2 := h.run(t, instance{name: "web-2", labels: map[string]string{"app": "web"}})
	c := startCaddy(t, "", proxySite(h, "web.test", "app=web", guestPort))
	pid := c.cmd.Process.Pid
	config := c.config(t)
	expectEven(t, c, "web.test", 5, w1, w2)

	_, sim := h.(*simHost)
	steps := []struct {
		what    string
		change  func()
		msg     string
		why     string // checked on the simulator, whose transitions are immediate
		serving []string
	}{
		{"pause web-2", func() { h.pause(t, w2) }, leaves, "paused", []string{w1}},
		// R1a: an instance without a health check joins once its port
		// accepts.
		{"resume web-2", func() { h.resume(t, w2) }, joins, "running and accepting connections", []string{w1, w2}},
		{"stop web-2", func() { h.stop(t, w2) }, leaves, "stopped", []string{w1}},
		{"start web-2", func() { h.start(t, w2) }, joins, "running and accepting connections", []string{w1, w2}},
		{"delete web-2", func() { h.remove(t, w2) }, leaves, "deleted", []string{w1}},
	}
	for _, s := range steps {
		why := awaitRotation(t, c, s.msg, w2, s.change)
		if sim && why != s.why {
			t.Errorf("%s: logged why %q, want %q", s.what, why, s.why)
		}
		expectEven(t, c, "web.test", 5, s.serving...)
	}
	var w3 string
	awaitRotation(t, c, joins, h.instanceName("web-3"), func() {
		w3 = h.run(t, instance{name: "web-3", labels: map[string]string{"app": "web"}})
	})
	expectEven(t, c, "web.test", 5, w1, w3)

	// All of it without a reload: the same process, the same config, one
	// config load, and no /load through the admin API.
	if !c.running() || c.cmd.Process.Pid != pid {
		t.Errorf("caddy pid %d is gone or changed", pid)
	}
	if now := c.config(t); string(now) != string(config) {
		t.Errorf("caddy's config changed:\nbefore %s\nafter  %s", config, now)
	}
	if n := c.count("serving initial configuration", nil); n != 1 {
		t.Errorf("caddy loaded its initial config %d times, want 1", n)
	}
	if n := c.count("received request", map[string]string{"uri": "/config/"}); n != 2 {
		t.Errorf("caddy logged %d admin requests for /config/, want 2: the /load check below would prove nothing", n)
	}
	if n := c.count("received request", map[string]string{"uri": "/load"}); n != 0 {
		t.Errorf("caddy received %d /load requests, want 0", n)
	}
}

func TestE2E_R5_standby_woken_through_published_port(t *testing.T) {
	h := newHost(t)
	name := h.run(t, instance{name: "sleepy", labels: map[string]string{"app": "sleepy"}, publish: true, standbyAfter: time.Minute})
	h.standby(t, name)
	c := startCaddy(t, "", proxySite(h, "sleepy.test", "app=sleepy", guestPort))
	port := h.hostPort(t, name)

	r := c.get("sleepy.test")
	if r.err != nil || r.status != http.StatusOK || r.body != hello(name) {
		t.Fatalf("request to the instance on standby: %v, want 200 %q", r, hello(name))
	}
	t.Logf("the waking request took %s", r.took.Round(time.Millisecond))
	s, sim := h.(*simHost)
	if sim && r.took < wakeDelay {
		t.Errorf("the waking request took %s, less than the wake itself (%s)", r.took, wakeDelay)
	}
	woken := wokenEvents(h.events(t, name))
	if len(woken) != 1 {
		t.Fatalf("%d STARTED events with woken_by_port, want 1: %v", len(woken), woken)
	}
	want := "Resumed instance from standby, woken by a connection to port " + strconv.Itoa(port)
	if got := woken[0].GetAttributes()["woken_by_port"]; got != strconv.Itoa(port) {
		t.Errorf("woken_by_port %q, want %d (the published port)", got, port)
	}
	if woken[0].GetMessage() != want {
		t.Errorf("wake message %q, want %q", woken[0].GetMessage(), want)
	}
	if st := h.state(t, name); st != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		t.Errorf("state after the wake: %v, want running", st)
	}
	if sim {
		if ps := s.processState(name); ps == "T" || ps == "" {
			t.Errorf("instance process state %q after the wake, want running", ps)
		}
		_, published := s.dials(t, name)
		if got := dialled(c); len(got) == 0 || got[0] != published {
			t.Errorf("first request dialled %v, want the published port %s", got, published)
		}
	}
	// Once running it is simply served, with no second wake.
	expectEven(t, c, "sleepy.test", 5, name)
	if n := len(wokenEvents(h.events(t, name))); n != 1 {
		t.Errorf("%d wakes after more requests, want 1", n)
	}
}

func TestE2E_R5_burst_wakes_only_one_of_several_standby_instances(t *testing.T) {
	h := newHost(t)
	var names []string
	for _, n := range []string{"sb-a", "sb-b", "sb-c"} {
		name := h.run(t, instance{name: n, labels: map[string]string{"app": "sleepy"}, publish: true, standbyAfter: time.Minute})
		h.standby(t, name)
		names = append(names, name)
	}
	c := startCaddy(t, "", proxySite(h, "sleepy.test", "app=sleepy", guestPort))

	results := c.burst("sleepy.test", 10)
	for i, r := range results {
		// The first on standby by name is the one woken (R5).
		if r.err != nil || r.status != http.StatusOK || r.body != hello(names[0]) {
			t.Errorf("request %d of the burst: %v, want 200 %q", i+1, r, hello(names[0]))
		}
	}
	changed := 0
	for _, n := range names {
		st := h.state(t, n)
		if st != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
			changed++
		}
		t.Logf("%s: %v, %d wakes", n, st, len(wokenEvents(h.events(t, n))))
	}
	if changed != 1 || h.state(t, names[0]) != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		t.Errorf("%d instances left standby, want exactly one, %s", changed, names[0])
	}
	wakes := 0
	for _, n := range names {
		wakes += len(wokenEvents(h.events(t, n)))
	}
	if wakes != 1 {
		t.Errorf("%d wakes, want 1", wakes)
	}
	if s, ok := h.(*simHost); ok {
		for _, n := range names[1:] {
			if ps := s.processState(n); ps != "T" {
				t.Errorf("%s's process state %q, want T (still frozen)", n, ps)
			}
		}
	}
}

func TestE2E_R2_route_without_selector_goes_by_caddy_host(t *testing.T) {
	h := newHost(t)
	shop := h.run(t, instance{name: "shop", labels: map[string]string{"caddy.host": "shop.test,www.shop.test"}, publish: true})
	blog := h.run(t, instance{name: "blog", labels: map[string]string{"caddy.host": "blog.test", "caddy.port": strconv.Itoa(guestPort)}})
	c := startCaddy(t, "", fmt.Sprintf(`
http:// {
	reverse_proxy {
		%s
	}
}
`, dynamic(h, "", 0)))

	expectEven(t, c, "shop.test", 5, shop)
	expectEven(t, c, "www.shop.test", 5, shop)
	expectEven(t, c, "SHOP.Test", 5, shop) // hosts match regardless of case
	expectEven(t, c, "blog.test", 5, blog)
	for _, host := range []string{"unclaimed.test", "test", "shop.test.example"} {
		if r := c.get(host); r.err != nil || r.status != http.StatusServiceUnavailable {
			t.Errorf("host %s: %v, want 503", host, r)
		}
	}
}

func TestE2E_R6_daemon_restart_keeps_serving(t *testing.T) {
	h := newHost(t)
	s := requireSim(t, h)
	r1 := h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}})
	r2 := h.run(t, instance{name: "web-2", labels: map[string]string{"app": "web"}})
	c := startCaddy(t, "", proxySite(h, "web.test", "app=web", guestPort))

	type sample struct {
		at time.Time
		r  result
	}
	var (
		mu      sync.Mutex
		samples []sample
	)
	since := func(t0 time.Time, body string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range samples {
			if s.at.After(t0) && (body == "" || s.r.body == body) {
				n++
			}
		}
		return n
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 { // two clients, each sending requests back to back
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
				r := c.get("web.test")
				mu.Lock()
				samples = append(samples, sample{time.Now(), r})
				mu.Unlock()
			}
		}()
	}
	stopClients := sync.OnceFunc(func() { close(quit); wg.Wait() })
	t.Cleanup(stopClients)
	start := time.Now()
	eventually(t, "20 requests before the outage", func() bool { return since(start, "") >= 20 })

	s.d.Stop()
	down := time.Now()
	// Caddy says it lost the daemon and keeps routing, then fails to
	// reconnect at least twice (logged once as an error, then at debug).
	eventually(t, "caddy notices the daemon is gone and fails to reconnect twice", func() bool {
		return c.countPrefix("lost the Dicer daemon: still routing") >= 1 &&
			c.countPrefix("cannot follow the Dicer daemon: still routing") >= 1 &&
			c.countPrefix("still cannot follow the Dicer daemon") >= 1
	})
	r3 := h.run(t, instance{name: "web-3", labels: map[string]string{"app": "web"}}) // created while the daemon is away
	eventually(t, "50 requests during the outage", func() bool { return since(down, "") >= 50 })
	if err := s.d.Restart(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	eventually(t, "web-3, created during the outage, is served once the daemon is back", func() bool {
		return since(up, hello(r3)) >= 3
	})
	stopClients()

	var failed []string
	outage, during := map[string]int{}, 0
	for _, s := range samples { // the clients are done
		if s.r.err != nil || s.r.status != http.StatusOK {
			failed = append(failed, s.r.String())
		}
		if s.at.After(down) && s.at.Before(up) {
			outage[s.r.body]++
			during++
		}
	}
	t.Logf("%d requests, %d of them during the %s outage: %d to web-1, %d to web-2",
		len(samples), during, up.Sub(down).Round(time.Millisecond), outage[hello(r1)], outage[hello(r2)])
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed, want none; first: %v", len(failed), len(samples), failed[:min(5, len(failed))])
	}
	if outage[hello(r1)] == 0 || outage[hello(r2)] == 0 || len(outage) != 2 {
		t.Errorf("requests during the outage went to %v, want web-1 and web-2 only", outage)
	}
	if n := s.d.Calls("ListInstances"); n < 2 {
		t.Errorf("ListInstances called %d times, want a re-list after the restart", n)
	}
	if n := c.count(joins, map[string]string{"instance": r3}); n != 1 {
		t.Errorf("web-3 logged joining the rotation %d times, want 1", n)
	}
}

func TestE2E_R9_tcp_listener_with_token_and_pinned_certificate(t *testing.T) {
	h := newHost(t)
	addr, token := h.tcpListener(t)
	tokenFile := filepath.Join(t.TempDir(), "dicer-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	web := h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}, publish: true})
	c := startCaddy(t, "", fmt.Sprintf(`
http://web.test {
	reverse_proxy {
		dynamic dicer %q %d {
			address %s
			token {file.%s}
		}
	}
}
`, h.selector("app=web"), guestPort, addr, tokenFile))

	expectEven(t, c, "web.test", 5, web)
	if s, ok := h.(*simHost); ok {
		// Over TCP on loopback, the published port is reached at the
		// network's gateway, which needs networks:read (R4, R9).
		_, published := s.dials(t, web)
		if got := dialled(c); count(got, published) != 5 {
			t.Errorf("dialled %v, want the published port %s", got, published)
		}
	}
	if c.logContains(secretOf(token)) {
		t.Error("caddy's log holds the token's secret")
	}
}

func TestE2E_R12_wrong_fingerprint_gets_no_routes_and_says_why(t *testing.T) {
	h := newHost(t)
	addr, token := h.tcpListener(t)
	i := strings.LastIndexByte(token, '_')
	if strings.Count(token, "_") != 2 || len(token)-i-1 != 64 {
		t.Skip("the token carries no fingerprint")
	}
	wrong := token[:i+1] + strings.Repeat("ab", 32)
	if wrong == token {
		wrong = token[:i+1] + strings.Repeat("cd", 32)
	}
	h.run(t, instance{name: "web-1", labels: map[string]string{"app": "web"}})
	c := startCaddy(t, "", fmt.Sprintf(`
http://web.test {
	reverse_proxy {
		dynamic dicer %q %d {
			address %s
			token %s
		}
	}
}
`, h.selector("app=web"), guestPort, addr, wrong))

	for i := range 5 {
		if r := c.get("web.test"); r.err != nil || r.status != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %v, want 503 (no routes)", i+1, r)
		}
	}
	eventually(t, "caddy's log says the fingerprint does not match the token", func() bool {
		return c.logContains("does not match the token")
	})
	if c.logContains(secretOf(token)) {
		t.Error("caddy's log holds the token's secret")
	}
	if s, ok := h.(*simHost); ok {
		if n := s.d.Calls("ListInstances"); n != 0 {
			t.Errorf("ListInstances reached the daemon %d times over an unpinned connection", n)
		}
	}
}

func TestE2E_R7_on_demand_tls_only_for_claimed_hosts(t *testing.T) {
	h := newHost(t)
	shop := h.run(t, instance{name: "shop", labels: map[string]string{"caddy.host": "shop.test"}, publish: true})
	old := h.run(t, instance{name: "old", labels: map[string]string{"caddy.host": "old.test"}})
	h.stop(t, old) // a claim holds in any state (R7)
	globals := fmt.Sprintf("on_demand_tls {\n\tpermission dicer {\n%s\t}\n}", indent(indent(h.settings())))
	c := startCaddy(t, globals, fmt.Sprintf(`
https:// {
	tls internal {
		on_demand
	}
	reverse_proxy {
		%s
	}
}
`, dynamic(h, "", 0)))

	// Trust Caddy's internal CA, as a client of this site would.
	rootFile := filepath.Join(c.dir, "caddy", "pki", "authorities", "local", "root.crt")
	eventually(t, "caddy's internal CA root exists", func() bool { _, err := os.Stat(rootFile); return err == nil })
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(readFile(rootFile))) {
		t.Fatalf("no certificate in %s", rootFile)
	}
	httpsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.httpsPort))
	handshake := func(name string) (*x509.Certificate, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return testkit.Handshake(ctx, httpsAddr, name, roots)
	}
	for _, name := range []string{"shop.test", "old.test"} {
		cert, err := handshake(name)
		if err != nil {
			t.Errorf("claimed host %s: handshake failed: %v", name, err)
			continue
		}
		if !slices.Contains(cert.DNSNames, name) {
			t.Errorf("claimed host %s: certificate for %v", name, cert.DNSNames)
		}
	}
	for _, name := range []string{"evil.test", "shop.test.evil"} {
		if _, err := handshake(name); err == nil {
			t.Errorf("unclaimed host %s: handshake succeeded", name)
		}
	}

	// And the site is served over the verified connection.
	client := testkit.HTTPSClient(httpsAddr, roots, 10*time.Second)
	defer client.CloseIdleConnections()
	res, err := client.Get("https://shop.test/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK || string(body) != hello(shop) {
		t.Errorf("https://shop.test/: %d %q, want 200 %q", res.StatusCode, body, hello(shop))
	}
}
