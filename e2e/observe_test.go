//go:build e2e && linux

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// caddyDicer runs `caddy dicer args...` of the binary under test against
// c's admin API and returns its output.
func caddyDicer(t *testing.T, c *caddyProc, args ...string) string {
	t.Helper()
	out, err := exec.Command(caddyBin, append(append([]string{"dicer"}, args...), "--address", c.admin)...).CombinedOutput()
	if err != nil {
		t.Fatalf("caddy dicer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Issue 11, from outside: the binary users build answers `caddy dicer`
// from a running Caddy, with each instance's verdict and where a host's
// requests go, and serves the metrics at its admin endpoint.
func TestE2E_observe_caddy_dicer_command_and_metrics(t *testing.T) {
	h := newHost(t)
	ok := h.run(t, instance{name: "ok", labels: map[string]string{"app": "web", "caddy.port": strconv.Itoa(guestPort)}})
	bad := h.run(t, instance{name: "bad", labels: map[string]string{"app": "web", "caddy.port": "abc"}})
	c := startCaddy(t, "", proxySite(h, "web.test", "app=web", 0))
	expectEven(t, c, "web.test", 3, ok)

	out := caddyDicer(t, c, "instances")
	for _, want := range []string{ok + " ", "routable", bad + " ", `caddy.port "abc" is not a port`} {
		if !strings.Contains(out, want) {
			t.Errorf("caddy dicer instances lacks %q:\n%s", want, out)
		}
	}
	out = caddyDicer(t, c, "explain", "web.test")
	if !strings.Contains(out, "1 target(s): "+ok+" ") {
		t.Errorf("caddy dicer explain web.test:\n%s", out)
	}
	out = caddyDicer(t, c, "daemons", "--json")
	var daemons []struct {
		Kind, State string
		Instances   int
	}
	if err := json.Unmarshal([]byte(out), &daemons); err != nil || len(daemons) != 1 ||
		daemons[0].Kind != "dicer" || daemons[0].State != "following" {
		t.Errorf("caddy dicer daemons --json: %v\n%s", err, out)
	}

	res, err := http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, want := range []string{`caddy_dicer_connected{daemon=`, `caddy_dicer_routable_instances{daemon=`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "caddy_dicer_connected{") && !strings.HasSuffix(line, " 1") {
			t.Errorf("%s, want 1", line)
		}
	}
}
