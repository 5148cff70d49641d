package engine

// The dashboard (R13d) in a real browser: headless Chromium loads it from
// the admin endpoint and the test reads what a person would see.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/dicercmd"
)

// dashboardArtifact is where the test keeps its screenshot, for CI.
const dashboardArtifact = "bin/artifacts/dashboard.png"

// rowOf is a JavaScript expression: the cells' text of the instances
// table's row whose first cell is name, or null.
func rowOf(name string) string {
	q, _ := json.Marshal(name)
	return `(() => { for (const tr of document.querySelectorAll("#instances tbody tr")) {
		const c = [...tr.children].map(td => td.textContent);
		if (c[0] === ` + string(q) + `) return c; } return null; })()`
}

// An instance appears on the dashboard within about a second of starting,
// its verdict text turns unhealthy when its health check fails, and a
// label holding markup shows as text; a screenshot is kept.
func TestDocker_R13d_dashboard_in_a_browser(t *testing.T) {
	needsCaddy(t)
	cli := engine(t)
	b := testkit.StartBrowser(t)
	app := dockertest.Name("dash")
	dockerCaddy(t, "", fmt.Sprintf(`
http://dash.test:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	// Caddy's admin endpoint refuses a browser's request whose Origin
	// or Referer is not its own (Sec-Fetch-Mode set, cross-site
	// mitigation), and a typed-in address has neither: the navigation
	// says it comes from the admin endpoint's own origin, as a link on it.
	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	if err := b.Navigate(admin+"/dicer/dashboard", admin+"/"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if took, ok := b.Until(ctx, 15*time.Second, `document.getElementById("status").textContent`, func(v json.RawMessage) bool {
		return strings.Contains(string(v), "live")
	}); !ok {
		var page string
		err := b.Eval(`location.href + " " + document.documentElement.outerHTML.slice(0, 600)`, &page)
		t.Fatalf("the dashboard did not go live within %s: %q %v", took, page, err)
	}

	hostile := `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"'`
	start := time.Now()
	c := dockertest.Start(t, cli, dockertest.Options{Name: "dash", Ports: []string{"127.0.0.1::8080"},
		Health: dockertest.HealthCheck(500*time.Millisecond, 0),
		Labels: map[string]string{"app": app, "note": hostile}})
	_, ok := b.Until(ctx, 10*time.Second, rowOf(c.Name), func(v json.RawMessage) bool { return string(v) != "null" })
	appeared := time.Since(start) // from the create and start calls to the row
	t.Logf("the instance appeared on the dashboard %s after it was created and started (poll every 500 ms)", appeared.Round(time.Millisecond))
	if !ok {
		t.Fatalf("the instance %s never appeared on the dashboard", c.Name)
	}
	if appeared > 8*time.Second {
		t.Errorf("the instance appeared %s after it started, want about a second (loose bound 8 s: a loaded 2-core CI machine)", appeared)
	}

	var cells []string
	if _, ok := b.Until(ctx, 20*time.Second, rowOf(c.Name), func(v json.RawMessage) bool {
		return json.Unmarshal(v, &cells) == nil && len(cells) > 5 && cells[5] == "routable"
	}); !ok {
		t.Fatalf("verdict never routable: %q", cells)
	}
	if !strings.Contains(cells[6], "note="+hostile) {
		t.Errorf("the hostile label does not show as text: labels cell %q", cells[6])
	}
	var pwned any
	if err := b.Eval(`[window.pwned, document.querySelectorAll("main script, main img").length]`, &pwned); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pwned) != "[<nil> 0]" {
		t.Errorf("the label's markup ran or made elements: [window.pwned, elements] = %v", pwned)
	}
	var routes string
	_ = b.Eval(`document.querySelector("#routes tbody").textContent`, &routes)
	if !strings.Contains(routes, c.Name+" ") {
		t.Errorf("the routes table does not show %s as a target: %q", c.Name, routes)
	}

	addr := dockertest.PublishedAddr(t, cli, c, "8080/tcp")
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if code, _, err := dockertest.Post(pctx, addr, "/health/bad"); err != nil || code != http.StatusOK {
		t.Fatalf("POST /health/bad: %d %v", code, err)
	}
	bad := time.Now()
	if took, ok := b.Until(ctx, 20*time.Second, rowOf(c.Name), func(v json.RawMessage) bool {
		return json.Unmarshal(v, &cells) == nil && len(cells) > 5 && cells[5] == "unhealthy"
	}); !ok {
		t.Fatalf("verdict never turned unhealthy within %s: %q", took, cells)
	}
	t.Logf("the verdict turned unhealthy on the dashboard %s after the app failed its check (interval 500ms, one retry)", time.Since(bad).Round(time.Millisecond))

	path := filepath.Join(repoRoot(t), dashboardArtifact)
	if err := b.Screenshot(path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	t.Logf("screenshot: %s", path)

	// `caddy dicer dashboard`: the page at an address typed into the
	// address bar (no Referer, no Origin), its reads relayed to the
	// admin endpoint, shows the same.
	typed, token := serveDashboardCommand(t, fmt.Sprintf("localhost:%d", adminPort))
	typed += "?token=" + token
	if err := b.Navigate(typed, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Until(ctx, 20*time.Second, rowOf(c.Name), func(v json.RawMessage) bool {
		return json.Unmarshal(v, &cells) == nil && len(cells) > 5 && cells[5] == "unhealthy"
	}); !ok {
		var page string
		_ = b.Eval(`location.href + " " + document.getElementById("status").textContent`, &page)
		t.Fatalf("the dashboard at the typed address %s does not show %s unhealthy: %q, page %q", typed, c.Name, cells, page)
	}
}

// repoRoot is the module's root: the root package's tests run there.
func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// serveDashboardCommand serves what `caddy dicer dashboard` serves, for
// the admin endpoint admin, on a free loopback port until t ends, and
// returns its URL, without the token, and the token.
func serveDashboardCommand(t *testing.T, admin string) (string, string) {
	t.Helper()
	handler, token, err := dicercmd.Dashboard(admin)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/", token
}
