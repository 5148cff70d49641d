//go:build e2e && linux

package firstbyte

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// rounds is how many wakes each side measures per way to sleep: a
// container's start varies by tens of milliseconds from one to the next,
// as much as the saving sought, so the saving is also taken pair by pair
// (off and on, one after the other).
const rounds = 20

// firstByteSite is the Caddyfile of the measurement: two HTTPS servers on
// every address of this namespace (the client comes from the delayed
// link), on, with dicer_prewake, and off, without; one site of the two
// hosts on both, routing by the containers' caddy.host labels.
func firstByteSite(admin, httpPort, on, off int, hosts []string) string {
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, fmt.Sprintf("https://%s:%d", h, on), fmt.Sprintf("https://%s:%d", h, off))
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	http_port %d
	skip_install_trust
	servers :%d {
		listener_wrappers {
			dicer_prewake {
				client_wakes 1000
			}
			tls
		}
	}
}

%s {
	tls internal
	reverse_proxy {
		dynamic docker {
			port 8080
		}
	}
}
`, admin, httpPort, on, strings.Join(addrs, ", "))
}

// fetch is one HTTPS GET from the delayed namespace, as curl times it
// from its start: the TCP connect done, the TLS handshake done, the first
// byte of the answer.
type fetch struct {
	status              int
	connect, tls, first time.Duration
	protocol            string
}

// sinceConnect is the time from the TCP connect to the first byte.
func (f fetch) sinceConnect() time.Duration { return f.first - f.connect }

// get fetches https://host:port/ with curl, in the namespace, from this
// end of the link's address (port: what dialPort gave).
func get(host string, port int) (fetch, error) {
	out, err := link.inside("curl", "-sk", "--max-time", "30",
		"--resolve", fmt.Sprintf("%s:%d:%s", host, port, link.host),
		"-o", "/dev/null", "-w", "%{http_code} %{time_connect} %{time_appconnect} %{time_starttransfer} %{http_version}",
		fmt.Sprintf("https://%s:%d/", host, port)).Output()
	if err != nil {
		return fetch{}, fmt.Errorf("curl: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 5 {
		return fetch{}, fmt.Errorf("curl wrote %q", out)
	}
	secs := func(s string) time.Duration {
		v, _ := strconv.ParseFloat(s, 64)
		return time.Duration(v * float64(time.Second))
	}
	status, _ := strconv.Atoi(f[0])
	return fetch{status: status, connect: secs(f[1]), tls: secs(f[2]), first: secs(f[3]), protocol: f[4]}, nil
}

// notRoutable waits until Caddy's catalog has the container name on
// standby, not routable.
func notRoutable(t *testing.T, admin int, name string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "Caddy has "+name+" on standby", func() bool {
		var list []diceradmin.InstanceStatus
		if err := json.Unmarshal([]byte(testkit.AdminGet(t, fmt.Sprintf("127.0.0.1:%d", admin), "/dicer/instances")), &list); err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.Name == name {
				return !in.Routable && in.State == "standby"
			}
		}
		return false
	})
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// R5n, the done-when of issue 34: the time from the client's TCP connect
// to the first byte of a 200 from a stopped container and from a paused
// one, 20 wakes each, with pre-wake off and on in turns, a round trip of
// 50 ms between the client and Caddy. Behaviour is asserted (every answer
// a 200, each wake through the pre-wake server started by its
// ClientHello, none through the other); the times are reported, not
// asserted.
func TestFirstByte_R5n_prewake_side_by_side(t *testing.T) {
	type sleeper struct {
		how  string // stop or pause
		host string
		c    dockertest.Container
	}
	var sleepers []*sleeper
	var hosts []string
	for _, how := range []string{"stop", "pause"} {
		host := dockertest.Name("fb-"+how) + ".test"
		labels := map[string]string{"caddy.host": host, "caddy.standby_after": "1h"}
		if how == "pause" {
			labels["caddy.standby"] = "pause"
		}
		c := dockertest.Start(t, cli, dockertest.Options{Name: "fb-" + how, Labels: labels})
		sleepers = append(sleepers, &sleeper{how: how, host: host, c: c})
		hosts = append(hosts, host)
	}
	admin, httpPort := testkit.FreePort(t, "127.0.0.1"), testkit.FreePort(t, "127.0.0.1")
	on, off := testkit.FreePort(t, "0.0.0.0"), testkit.FreePort(t, "0.0.0.0")
	p := &testkit.CaddyProcess{Name: "firstbyte", Bin: caddyBin, Home: t.TempDir(), Admin: admin}
	p.Config = filepath.Join(p.Home, "Caddyfile")
	if err := os.WriteFile(p.Config, []byte(firstByteSite(admin, httpPort, on, off, hosts)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start(t)
	dialOn, dialOff := link.dialPort(t, on), link.dialPort(t, off)
	t.Logf("the round trip: %s, by %s", 2*link.delay, map[bool]string{true: "tc netem on both ends of the veth pair", false: "a relay on this end of it (no netem in this kernel)"}[link.netem])
	for _, s := range sleepers { // warm: certificates loaded, the route known, the containers up
		for _, port := range []int{dialOn, dialOff} {
			testkit.Eventually(t, 30*time.Second, "a 200 for "+s.host, func() bool {
				f, err := get(s.host, port)
				return err == nil && f.status == 200
			})
		}
	}
	metrics := func() string { return testkit.AdminGet(t, fmt.Sprintf("127.0.0.1:%d", admin), "/metrics") }
	woke := func(cause string) float64 {
		return testkit.MetricSum(t, metrics(), "caddy_dicer_wakes_started_total", `cause="`+cause+`"`)
	}
	helloBefore, requestBefore := woke("client_hello"), woke("request")

	times := map[string][]fetch{}
	for round := range rounds {
		for _, s := range sleepers {
			for _, side := range []string{"off", "on"} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var err error
				if s.how == "pause" {
					err = cli.ContainerPause(ctx, s.c.ID)
				} else {
					err = cli.ContainerStop(ctx, s.c.ID, container.StopOptions{})
				}
				cancel()
				if err != nil {
					t.Fatalf("%s %s: %v", s.how, s.c.Name, err)
				}
				notRoutable(t, admin, s.c.Name)
				port := dialOff
				if side == "on" {
					port = dialOn
				}
				f, err := get(s.host, port)
				if err != nil || f.status != 200 {
					t.Fatalf("round %d, %s, pre-wake %s: %+v %v, want a 200", round, s.how, side, f, err)
				}
				times[s.how+" "+side] = append(times[s.how+" "+side], f)
			}
		}
	}
	if got := woke("client_hello") - helloBefore; got != 2*rounds {
		t.Errorf("%v wakes started by a ClientHello, want %d: one per fetch through the pre-wake server", got, 2*rounds)
	}
	if got := woke("request") - requestBefore; got != 2*rounds {
		t.Errorf("%v wakes started by a request, want %d: one per fetch through the other server", got, 2*rounds)
	}

	rtt := 2 * link.delay
	for _, how := range []string{"stop", "pause"} {
		var offD, onD, window, offWait []time.Duration
		for _, f := range times[how+" off"] {
			offD = append(offD, f.sinceConnect())
			offWait = append(offWait, f.first-f.tls)
		}
		for _, f := range times[how+" on"] {
			onD = append(onD, f.sinceConnect())
			window = append(window, f.tls-f.connect)
		}
		saving := median(offD) - median(onD)
		var pairs []time.Duration
		for i := range offD {
			pairs = append(pairs, offD[i]-onD[i])
		}
		wake := median(offWait) - rtt // after the handshake: the request's trip, the wake, the answer's trip
		overlap := min(median(window), wake)
		t.Logf("%s: TCP connect to first byte, %d wakes each (%s): pre-wake off median %s max %s; on median %s max %s; "+
			"saving %s = %.2f round trips (pair by pair: median %s = %.2f round trips). The ClientHello comes %s before the request (the handshake); "+
			"the wake takes about %s; they overlap %s",
			how, rounds, times[how+" on"][0].protocol, ms(median(offD)), ms(slices.Max(offD)), ms(median(onD)), ms(slices.Max(onD)),
			ms(saving), float64(saving)/float64(rtt), ms(median(pairs)), float64(median(pairs))/float64(rtt), ms(median(window)), ms(wake), ms(overlap))
	}
}
