package engine

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R11, R11h against the real Engine: a container on the host's network is
// routed to on its caddy.port at published_port_host (the host's address
// on the default bridge here); one whose caddy.network label names a
// network it is not on, and one on network none, each get one warning
// naming them and why (once per connection).
func TestDocker_R11h_network_modes(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r11h")
	port := testkit.FreePort(t, "0.0.0.0")
	hostHost := hostName("r11h-host")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	@host host %s
	handle @host {
		reverse_proxy {
			dynamic docker {
				selector app=%s
				published_port_host 172.17.0.1
			}
		}
	}
	handle {
		reverse_proxy {
			dynamic docker app=%s 8080
		}
	}
}`, httpPort, hostHost, app, app))
	dockertest.Start(t, cli, dockertest.Options{Name: "r11h-host", Network: "host", Env: []string{"PORT=" + strconv.Itoa(port)},
		Labels: map[string]string{"app": app, "caddy.port": strconv.Itoa(port)}})
	answersWithin(t, tester, hostHost, http.StatusOK, hello("r11h-host"), waitFor)

	typo := dockertest.Start(t, cli, dockertest.Options{Name: "r11h-typo", Labels: map[string]string{"app": app, "caddy.network": "brigde"}})
	none := dockertest.Start(t, cli, dockertest.Options{Name: "r11h-none", Network: "none", Labels: map[string]string{"app": app, "caddy.port": "8080"}})
	for c, why := range map[string]string{
		typo.Name: "not on network brigde (its caddy.network label): it is on bridge",
		none.Name: "on network none: it has no networking",
	} {
		// Once per catalog: the two routes' settings differ, so they have
		// a connection each (issue 18.5), and each says it once.
		if !testkit.UntilEvery(waitFor, 10*time.Millisecond, func() bool {
			return len(testkit.LogLines(t, logFile, `"instance gets no requests: `+why, `"instance":"`+c+`"`)) == 2
		}) {
			t.Fatalf("no warning %q for %s; its log lines: %q", why, c, testkit.LogLines(t, logFile, c))
		}
	}
}
