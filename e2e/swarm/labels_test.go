//go:build e2e && linux

package swarm

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// labelAdd changes a service's labels with `docker service update
// --label-add`, as an operator does on a running service.
func labelAdd(t *testing.T, s svc, labels ...string) {
	t.Helper()
	args := []string{"service", "update", "--detach", "--quiet"}
	for _, l := range labels {
		args = append(args, "--label-add", l)
	}
	if out, err := docker(time.Minute, append(args, s.name)...); err != nil {
		t.Fatalf("docker service update --label-add %v: %v\n%s", labels, err, out)
	}
}

// servedAt sends n requests for host and path and counts the answers by
// the task that gave them, and the failures.
func servedAt(host, path string, n int) (byHost map[string]int, failed int) {
	byHost = map[string]int{}
	for range n {
		r := testkit.Caddy{Addr: caddyAddr, Client: httpClient}.Get(context.Background(), host, path)
		if r.Err != nil || r.Status != 200 {
			failed++
			continue
		}
		byHost[strings.TrimPrefix(strings.TrimSpace(r.Body), "hello from ")]++
	}
	return byHost, failed
}

// only reports whether every request was answered and by tasks of want.
func only(byHost map[string]int, failed int, want map[string]bool) bool {
	if failed != 0 || len(byHost) == 0 {
		return false
	}
	for h := range byHost {
		if !want[h] {
			return false
		}
	}
	return true
}

func hostSet[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// R2d on Swarm: two services claim one host; once `docker service update
// --label-add caddy.path=/api` labels one of them, requests under /api go
// to its tasks alone, and every other path to the unlabelled service's.
func TestSwarm_R2d_path_label_added_routes_by_prefix(t *testing.T) {
	host := "paths." + network + ".test"
	web := createServiceFor(t, "pweb", host, helloV1, 1)
	api := createServiceFor(t, "papi", host, helloV1, 1)
	webTasks, apiTasks := hostSet(waitRunning(t, web, 1)), hostSet(waitRunning(t, api, 1))
	both := map[string]bool{}
	for h := range webTasks {
		both[h] = true
	}
	for h := range apiTasks {
		both[h] = true
	}
	// Before the label, both services serve every path of the host.
	var byHost map[string]int
	var failed int
	testkit.Eventually(t, 30*time.Second, "both services serve the host", func() bool {
		byHost, failed = servedAt(host, "/api/orders", 8)
		return only(byHost, failed, both) && len(byHost) == 2
	})
	labelAdd(t, api, "caddy.path=/api")
	began := time.Now()
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool {
		byHost, failed = servedAt(host, "/api/orders", 4)
		return only(byHost, failed, apiTasks)
	}) {
		t.Fatalf("/api/orders served by %v (%d failed) after the label, want %v only; Caddy's log:\n%s", byHost, failed, apiTasks, caddyLog(host))
	}
	t.Logf("the caddy.path label reached the route %v after docker service update returned", time.Since(began).Round(time.Millisecond))
	cases := []struct {
		path string
		want map[string]bool
	}{
		{"/api", apiTasks}, {"/api/", apiTasks}, {"/API/orders", apiTasks}, {"/api/v2/x", apiTasks},
		{"/", webTasks}, {"/cart", webTasks}, {"/apix", webTasks}, {"/api/../admin", webTasks},
	}
	for _, c := range cases {
		if byHost, failed := servedAt(host, c.path, 10); !only(byHost, failed, c.want) {
			t.Errorf("%s served by %v (%d failed), want %v only", c.path, byHost, failed, c.want)
		}
	}
}

// R4c on Swarm: two services claim one host routed with lb_policy
// dicer_weighted; `docker service update --label-add caddy.weight=9` on
// one and `caddy.weight=1` on the other split the requests about 90/10.
func TestSwarm_R4c_weight_labels_split_90_10(t *testing.T) {
	const host = "weighted.swarm.test" // the caddyfile's dicer_weighted site
	heavy := createServiceFor(t, "wheavy", host, helloV1, 1)
	light := createServiceFor(t, "wlight", host, helloV1, 1)
	heavyTasks, lightTasks := hostSet(waitRunning(t, heavy, 1)), hostSet(waitRunning(t, light, 1))
	count := func(byHost map[string]int) (h, l int) {
		for k, n := range byHost {
			switch {
			case heavyTasks[k]:
				h += n
			case lightTasks[k]:
				l += n
			}
		}
		return h, l
	}
	testkit.Eventually(t, 30*time.Second, "both services serve the host", func() bool {
		byHost, failed := servedAt(host, "/", 8)
		h, l := count(byHost)
		return failed == 0 && h > 0 && l > 0
	})
	labelAdd(t, heavy, "caddy.weight=9")
	labelAdd(t, light, "caddy.weight=1")
	// Until the labels reach the route the split is even: wait for a
	// round of 100 that leans clearly towards the heavy service.
	testkit.Eventually(t, 30*time.Second, "the weights reach the route", func() bool {
		byHost, failed := servedAt(host, "/", 100)
		h, _ := count(byHost)
		return failed == 0 && h >= 75
	})
	const n = 400
	byHost, failed := servedAt(host, "/", n)
	h, l := count(byHost)
	share := float64(l) / float64(n)
	t.Logf("weights 9:1 over %d requests: heavy %d, light %d (%.1f%%), failed %d", n, h, l, 100*share, failed)
	if failed != 0 || h+l != n {
		t.Fatalf("%d of %d requests failed or went elsewhere: %v", n-h-l, n, byHost)
	}
	// 10% expected; binomial sd over 400 is 1.5%: 4% to 17% is more than
	// four of them either way.
	if share < 0.04 || share > 0.17 {
		t.Errorf("the caddy.weight=1 service got %.1f%% of %d requests, want about 10%%", 100*share, n)
	}
}

// tcpHello sends one HTTP/1.0 request over a new TCP connection to addr
// and returns the task that answered.
func tcpHello(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: l4.test\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	_, body, _ := strings.Cut(string(b), "\r\n\r\n")
	return strings.TrimPrefix(strings.TrimSpace(body), "hello from "), nil
}

// R14 on Swarm: the layer-4 route `dicer_proxy swarm l4=swarm 8080`
// sends TCP connections to the tasks of the service labelled l4=swarm,
// one pick per connection, in rotation over its two tasks.
func TestSwarm_R14_connections_rotate_over_tasks(t *testing.T) {
	s := createServiceFor(t, "l4", "", helloV1, 2, "--label", "l4=swarm")
	ts := hostSet(waitRunning(t, s, 2))
	seen := map[string]int{}
	testkit.Eventually(t, 30*time.Second, "both tasks answer through the layer-4 route", func() bool {
		if h, err := tcpHello(l4Addr); err == nil && ts[h] {
			seen[h]++
		}
		return len(seen) == 2
	})
	seen = map[string]int{}
	const n = 40
	for range n {
		h, err := tcpHello(l4Addr)
		if err != nil {
			t.Fatalf("a connection through dicer_proxy swarm: %v; Caddy's log:\n%s", err, caddyLog("dicer_proxy"))
		}
		if !ts[h] {
			t.Fatalf("answered by %q, not a task of %s (%v)", h, s.name, ts)
		}
		seen[h]++
	}
	t.Logf("%d connections by task: %v", n, seen)
	for h := range ts {
		if seen[h] != n/2 {
			t.Errorf("%d connections answered %v, want %d by each task in rotation", n, seen, n/2)
			break
		}
	}
}
