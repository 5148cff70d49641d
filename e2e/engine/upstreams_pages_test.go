package engine

// The waiting page (R5h) and maintenance (R5i) through the in-process Caddy:
// Docker against the real Engine, Dicer against the test daemon.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// browserAccept is what a browser's navigation sends.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// pageReply is one answer, with the headers the pages set.
type pageReply struct {
	status                    int
	body, retryAfter, refresh string
	upstream                  string
	took                      time.Duration
}

// fetchAs sends GET path for host to Caddy's HTTP port with this Accept
// ("" none, as curl sends */*), on a connection of its own.
func fetchAs(t *testing.T, host, path, accept string, timeout time.Duration) pageReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", httpPort, path), nil)
	req.Host = host
	req.Header.Set("Accept", "*/*")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	start := time.Now()
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("GET %s%s: %v", host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return pageReply{status: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After"),
		refresh: resp.Header.Get("Refresh"), upstream: resp.Header.Get("X-Upstream"), took: time.Since(start)}
}

// adminPost POSTs body (JSON) to path of the in-process Caddy's admin
// endpoint and returns the answer's status and body.
func adminPostJSON(t *testing.T, path string, body any) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(fmt.Sprintf("http://localhost:%d%s", adminPort, path), "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A browser's request for a container that starts slowly gets the waiting
// page after wake_page_after, and its reloads reach the app within a
// second of the app listening; a request without text/html in Accept is
// held as before and gets the app (R5h).
func TestDocker_R5h_browser_sees_the_waiting_page_then_the_app(t *testing.T) {
	const pageAfter, listenDelay = time.Second, 4 * time.Second
	s := newStandbyCase(t, "pg-wait", dockertest.Options{NoStart: true,
		Env:    []string{"LISTEN_DELAY=" + listenDelay.String()},
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "wake_page_after "+pageAfter.String())

	first := fetchAs(t, s.host, "/", browserAccept, 30*time.Second)
	t.Logf("the waiting page came after %s (wake_page_after %s)", first.took.Round(time.Millisecond), pageAfter)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "Starting ") || first.refresh != "1" {
		t.Fatalf("first browser request: %d, Refresh %q, body:\n%s", first.status, first.refresh, first.body)
	}
	if first.took < pageAfter-100*time.Millisecond || first.took > pageAfter+2*time.Second {
		t.Errorf("the page came after %s, want about %s (loose bound +2s)", first.took, pageAfter)
	}
	// Reload as the page says, as a browser does, until the app answers.
	var served time.Time
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second) // Refresh: 1
		r := fetchAs(t, s.host, "/", browserAccept, 30*time.Second)
		if r.status == http.StatusOK {
			served = time.Now()
			break
		}
		if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "Starting ") {
			t.Fatalf("reload: %d %q", r.status, r.body)
		}
	}
	if served.IsZero() {
		t.Fatal("the app never answered a reload within 30 s")
	}
	r := fetchAs(t, s.host, "/listening", "", 5*time.Second)
	ns, err := strconv.ParseInt(strings.TrimSpace(r.body), 10, 64)
	if err != nil {
		t.Fatalf("/listening: %q", r.body)
	}
	lag := served.Sub(time.Unix(0, ns))
	t.Logf("a reload reached the app %s after it listened", lag.Round(time.Millisecond))
	if lag > 2500*time.Millisecond {
		t.Errorf("a reload reached the app %s after it listened, want within 1 s (loose bound 2.5 s)", lag)
	}
}

// curl (no text/html in Accept) is held through the slow start as before
// and gets the app, never the page (R5h).
func TestDocker_R5h_curl_is_held_as_before(t *testing.T) {
	s := newStandbyCase(t, "pg-curl", dockertest.Options{NoStart: true,
		Env:    []string{"LISTEN_DELAY=2s"},
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "wake_page_after 500ms")
	r := fetchAs(t, s.host, "/", "", 30*time.Second)
	t.Logf("curl's request was held %s", r.took.Round(time.Millisecond))
	if r.status != http.StatusOK || r.body != hello("pg-curl") {
		t.Fatalf("curl: %d %q, want 200 from the app", r.status, r.body)
	}
	if r.took < time.Second {
		t.Errorf("curl was answered after %s: it did not wait for the app's start (LISTEN_DELAY 2s)", r.took)
	}
}

// hostileMessage is a maintenance message that would be markup.
const hostileMessage = `back at <script>alert("x")</script> & 'soon'`

// escapedMessage is hostileMessage as html/template writes it.
const escapedMessage = `back at &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;soon&#39;`

// checkMaintenance asserts the maintenance answers for host: the page
// (message escaped) to a browser, one line to curl, 503 with Retry-After
// both, and neither from the instance (X-Upstream names the page server).
func checkMaintenance(t *testing.T, host, message, escaped, instanceDial string) {
	t.Helper()
	var page pageReply
	eventually(t, "the maintenance page for "+host, func() bool {
		page = fetchAs(t, host, "/", browserAccept, 10*time.Second)
		return page.status == http.StatusServiceUnavailable && strings.Contains(page.body, "Down for maintenance")
	})
	if !strings.Contains(page.body, escaped) || strings.Contains(page.body, "<script>") || page.retryAfter != "30" {
		t.Fatalf("maintenance page: Retry-After %q, message not escaped as %q:\n%s", page.retryAfter, escaped, page.body)
	}
	plain := fetchAs(t, host, "/", "", 10*time.Second)
	if plain.status != http.StatusServiceUnavailable || plain.body != "503 Service Unavailable: down for maintenance: "+message+"\n" {
		t.Fatalf("curl in maintenance: %d %q", plain.status, plain.body)
	}
	for _, r := range []pageReply{page, plain} {
		if r.upstream == "" || (instanceDial != "" && r.upstream == instanceDial) || !strings.HasPrefix(r.upstream, "127.0.0.1:") {
			t.Errorf("answered through upstream %q, want the loopback page server, never the instance", r.upstream)
		}
	}
}

// Maintenance on Docker: by the caddy.maintenance label, and by the admin
// switch for a selector, on and off (R5i).
func TestDocker_R5i_maintenance_label_and_admin(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("pg-maint")
	c := dockertest.Start(t, cli, dockertest.Options{Name: "pg-maint",
		Labels: map[string]string{"app": app, "caddy.maintenance": hostileMessage}})
	c2 := dockertest.Start(t, cli, dockertest.Options{Name: "pg-maint2",
		Labels: map[string]string{"app": app + "-2"}})
	_ = c
	_ = c2
	_, _ = dockerCaddy(t, "", fmt.Sprintf(`
http://one.test:%[1]d {
	reverse_proxy {
		dynamic docker app=%[2]s 8080
		%[3]s
	}
}
http://two.test:%[1]d {
	reverse_proxy {
		dynamic docker app=%[2]s-2 8080
		%[3]s
	}
}`, httpPort, app, upstreamHeader))
	checkMaintenance(t, "one.test", hostileMessage, escapedMessage, "")

	eventually(t, "two.test served by its container", func() bool {
		return fetchAs(t, "two.test", "/", "", 10*time.Second).body == hello("pg-maint2")
	})
	served := fetchAs(t, "two.test", "/", "", 10*time.Second).upstream
	status, body := adminPostJSON(t, "/dicer/maintenance", diceradmin.MaintenanceRequest{Selector: "app=" + app + "-2", On: true, Message: hostileMessage})
	if status != http.StatusOK || !strings.Contains(body, `"changed": 1`) {
		t.Fatalf("POST /dicer/maintenance on: %d %s", status, body)
	}
	checkMaintenance(t, "two.test", hostileMessage, escapedMessage, served)
	if status, body = adminPostJSON(t, "/dicer/maintenance", diceradmin.MaintenanceRequest{Selector: "app=" + app + "-2", On: false}); status != http.StatusOK {
		t.Fatalf("POST /dicer/maintenance off: %d %s", status, body)
	}
	if r := fetchAs(t, "two.test", "/", browserAccept, 10*time.Second); r.status != http.StatusOK || r.body != hello("pg-maint2") {
		t.Fatalf("after the switch is off: %d %q", r.status, r.body)
	}
	if status, _ = adminPostJSON(t, "/dicer/maintenance", map[string]any{"selector": "app in (", "on": true}); status != http.StatusBadRequest {
		t.Errorf("a bad selector: %d, want 400", status)
	}
}

// Maintenance on Dicer: by the label, and by the admin switch (R5i).
func TestCaddy_R5i_maintenance_on_dicer(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "web-1", "127.0.0.1", map[string]string{"app": "web", "caddy.maintenance": hostileMessage})
	d.HelloInstance(t, "api-1", "127.0.0.1", map[string]string{"app": "api"})
	startCaddy(t, "", fmt.Sprintf(`
http://web.test:%[1]d {
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%[2]s
		}
		%[3]s
	}
}
http://api.test:%[1]d {
	reverse_proxy {
		dynamic dicer app=api {
			address unix:%[2]s
		}
		%[3]s
	}
}`, httpPort, sock, upstreamHeader))
	checkMaintenance(t, "web.test", hostileMessage, escapedMessage, "")
	eventually(t, "api.test served", func() bool {
		return fetchAs(t, "api.test", "/", "", 10*time.Second).body == hello("api-1")
	})
	served := fetchAs(t, "api.test", "/", "", 10*time.Second).upstream
	if status, body := adminPostJSON(t, "/dicer/maintenance", diceradmin.MaintenanceRequest{Selector: "app=api", On: true}); status != http.StatusOK {
		t.Fatalf("POST on: %d %s", status, body)
	}
	checkMaintenance(t, "api.test", "This site is down for maintenance.", "This site is down for maintenance.", served)
	if status, body := adminPostJSON(t, "/dicer/maintenance", diceradmin.MaintenanceRequest{Selector: "app=api", On: false}); status != http.StatusOK {
		t.Fatalf("POST off: %d %s", status, body)
	}
	if r := fetchAs(t, "api.test", "/", "", 10*time.Second); r.body != hello("api-1") {
		t.Fatalf("after the switch is off: %d %q", r.status, r.body)
	}
}

// `caddy dicer maintenance SELECTOR on|off [MESSAGE]` switches through the
// admin API (R5i).
func TestCaddy_R5i_maintenance_cli(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	d.HelloInstance(t, "cli-1", "127.0.0.1", map[string]string{"app": "cli"})
	startCaddy(t, "", fmt.Sprintf(`
http://cli.test:%[1]d {
	reverse_proxy {
		dynamic dicer app=cli {
			address unix:%[2]s
		}
	}
}`, httpPort, sock))
	eventually(t, "cli.test served", func() bool { return fetchAs(t, "cli.test", "/", "", 10*time.Second).body == hello("cli-1") })
	out := cli(t, "maintenance", "app=cli", "on", "upgrading <db>")
	if !strings.Contains(out, "app=cli") {
		t.Fatalf("caddy dicer maintenance on said:\n%s", out)
	}
	if r := fetchAs(t, "cli.test", "/", "", 10*time.Second); r.status != http.StatusServiceUnavailable || r.body != "503 Service Unavailable: down for maintenance: upgrading <db>\n" {
		t.Fatalf("in maintenance: %d %q", r.status, r.body)
	}
	cli(t, "maintenance", "app=cli", "off")
	if r := fetchAs(t, "cli.test", "/", "", 10*time.Second); r.body != hello("cli-1") {
		t.Fatalf("after off: %d %q", r.status, r.body)
	}
}
