package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// R9a: at connect, the connection asks the daemon its version (the test
// daemon's GetHostInfo here; the Engine's /version in
// TestDocker_R9a_engine_version), logs it with the "connected" line, and
// shows it in /dicer/daemons and `caddy dicer daemons`, with no warning
// for a daemon that says its version.
func TestCaddy_R9a_daemon_version_shown(t *testing.T) {
	needsCaddy(t)
	d := dicertest.New()
	defer d.Close()
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.HelloInstance(t, "web-1", "127.0.0.131", map[string]string{"app": "web", "caddy.host": "web.test"})
	t.Setenv("TEST_DICER_TOKEN", d.AddToken("caddy", "instances:read", "events:read", "networks:read"))
	tester, logFile := startCaddy(t, "", fmt.Sprintf(`
http://web.test:%[2]d {
	reverse_proxy {
		dynamic dicer app=web {
			address %[1]s
			token {env.TEST_DICER_TOKEN}
		}
	}
}`, addr, httpPort))
	answers(t, tester, "web.test", http.StatusOK, hello("web-1"))
	want := daemonver.New("dicerd", dicertest.Version, "").String()
	var shown diceradmin.DaemonStatus
	eventually(t, "/dicer/daemons shows the daemon's version", func() bool {
		var list []diceradmin.DaemonStatus
		adminJSON(t, "/dicer/daemons", &list)
		for _, d := range list {
			if d.Address == addr {
				shown = d
			}
		}
		return shown.Version == want
	})
	if len(shown.VersionWarnings) != 0 {
		t.Errorf("version warnings %q for a daemon that says its version", shown.VersionWarnings)
	}
	if out := cli(t, "daemons"); !strings.Contains(out, "VERSION") || !strings.Contains(out, want) {
		t.Errorf("caddy dicer daemons does not show the version %q:\n%s", want, out)
	}
	testkit.Eventually(t, 5*time.Second, "the connected line carries the version", func() bool {
		return strings.Contains(testkit.ReadFile(t, logFile), `"version":"`+want+`"`)
	})
}

// R9a on the real Engine: the version shown is the one the Engine's
// /version answers.
func TestDocker_R9a_engine_version(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Docker Engine and Caddy's fixed ports")
	}
	cli := engine(t)
	v, err := cli.ServerVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	app := dockertest.Name("ver")
	dockertest.Start(t, cli, dockertest.Options{Name: "ver", Labels: map[string]string{"app": app}})
	dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	awaitListed(t, app)
	eventually(t, "/dicer/daemons shows the Engine's version", func() bool {
		var list []diceradmin.DaemonStatus
		adminJSON(t, "/dicer/daemons", &list)
		for _, d := range list {
			if d.Kind == "docker" && strings.Contains(d.Version, " "+v.Version+" (API "+v.APIVersion+")") {
				return true
			}
		}
		return false
	})
}
