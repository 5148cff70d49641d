package engine

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// Weights (R4c) and sticky sessions (R4d) on the real Engine: containers,
// runtime weights for labels that cannot change, and recreates under the
// same container name with new IDs.

func TestDocker_R4c_weights_split_and_runtime_weight(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r4c")
	a := dockertest.Start(t, cli, dockertest.Options{Name: "r4c-a", Labels: map[string]string{"app": app, "caddy.weight": "90"}})
	b := dockertest.Start(t, cli, dockertest.Options{Name: "r4c-b", Labels: map[string]string{"app": app, "caddy.weight": "10"}})
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy dicer_weighted
	}
}`, httpPort, app))
	host := hostName("r4c")
	answeredBy(t, tester, host, 2)

	counts := countBodies(t, host, 20000, 8)
	share := float64(counts[hello("r4c-b")]) / 20000
	t.Logf("20,000 requests: %v (r4c-b %.2f%%)", counts, 100*share)
	if counts[hello("r4c-a")]+counts[hello("r4c-b")] != 20000 || share < 0.09 || share > 0.11 {
		t.Fatalf("r4c-b got %.2f%%, want 10%% ± 1%%: %v", 100*share, counts)
	}

	// The labels cannot change without a recreate: a runtime weight.
	if status, body := adminPost(t, "/dicer/weight", `{"instance": "`+b.Name+`", "weight": 0}`); status != http.StatusOK {
		t.Fatalf("POST /dicer/weight: %d %s", status, body)
	}
	if got := countBodies(t, host, 300, 4); got[hello("r4c-a")] != 300 {
		t.Fatalf("r4c-b at weight 0: %v, want all 300 on r4c-a", got)
	}
	// The warm spare serves once r4c-a is gone.
	if err := cli.ContainerStop(t.Context(), a.ID, container.StopOptions{Timeout: new(int)}); err != nil {
		t.Fatal(err)
	}
	answers(t, tester, host, http.StatusOK, hello("r4c-b"))
	if got := countBodies(t, host, 100, 4); got[hello("r4c-b")] != 100 {
		t.Fatalf("r4c-a stopped: %v, want all 100 on the spare r4c-b", got)
	}
}

func TestDocker_R4d_sticky_sessions_survive_recreates(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r4d")
	names := []string{"r4d-1", "r4d-2", "r4d-3"}
	ids := map[string]string{}
	deploy := func(gen int) {
		for _, n := range names {
			c := dockertest.Start(t, cli, dockertest.Options{Name: n, Labels: map[string]string{"app": app},
				Env: []string{"NAME=" + n + " gen" + strconv.Itoa(gen)}})
			ids[n] = c.ID
		}
	}
	deploy(0)
	dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
		lb_policy dicer_sticky
	}
}`, httpPort, app))
	host := hostName("r4d")
	freshAnswered(t, host, 3)
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)

	clients := newStickyClients(t, 100)
	per := map[string]int{}
	for _, c := range clients {
		c.visit(t, addr, host)
		per[c.at]++
	}
	t.Logf("100 sessions: %v", per)

	for gen := 1; gen <= 2; gen++ {
		for _, n := range names { // stop-first: no request in the gap
			if err := cli.ContainerRemove(t.Context(), ids[n], container.RemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}
		deploy(gen)
		freshAnswered(t, host, 3) // all three new ones serve
		for _, c := range clients {
			if body := c.visit(t, addr, host); !strings.HasSuffix(body, "gen"+strconv.Itoa(gen)+"\n") {
				t.Fatalf("generation %d: answered %q", gen, body)
			}
		}
	}
	moved := 0
	for _, c := range clients {
		moved += c.moves
	}
	if moved != 0 {
		t.Fatalf("%d sessions moved across two recreates, want 0", moved)
	}

	if err := cli.ContainerRemove(t.Context(), ids["r4d-1"], container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "r4d-1 gone from the admin API", func() bool {
		for _, in := range adminInstances(t) {
			if in.Name == dockertest.Name("r4d-1") {
				return false
			}
		}
		return true
	})
	for range 3 {
		for _, c := range clients {
			c.visit(t, addr, host)
		}
	}
	moved = 0
	for i, c := range clients {
		moved += c.moves
		if c.moves > 1 || c.at == "r4d-1" {
			t.Errorf("client %d: %d moves, now on %s", i, c.moves, c.at)
		}
	}
	if moved != per["r4d-1"] {
		t.Errorf("%d sessions moved after r4d-1 left, want its %d", moved, per["r4d-1"])
	}
}

// freshAnswered waits until n distinct bodies answer for host, asked with
// no cookie (a sticky route keeps a client with cookies on one).
func freshAnswered(t *testing.T, host string, n int) {
	t.Helper()
	c := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: &http.Client{Timeout: waitFor}}
	seen := map[string]bool{}
	eventually(t, fmt.Sprintf("%d instances answer %s", n, host), func() bool {
		if r := c.GetWithin(host, waitFor); r.Is(http.StatusOK, "") {
			seen[r.Body] = true
		}
		return len(seen) >= n
	})
}

// Path prefixes (R2d) on the real Engine: three containers at no path,
// /api and /api/v2 behind one route; each request goes to the instances
// of the longest prefix that matches on segment boundaries, the rest to
// the one without caddy.path; when /api/v2's container is removed, its
// requests fall back to /api's.
func TestDocker_R2d_path_prefixes(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r2d")
	dockertest.Start(t, cli, dockertest.Options{Name: "r2d-root", Labels: map[string]string{"app": app}})
	dockertest.Start(t, cli, dockertest.Options{Name: "r2d-api", Labels: map[string]string{"app": app, "caddy.path": "/api"}})
	v2 := dockertest.Start(t, cli, dockertest.Options{Name: "r2d-v2", Labels: map[string]string{"app": app, "caddy.path": "/api/v2"}})
	tester, _ := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	host := hostName("r2d")
	answers(t, tester, host, http.StatusOK, hello("r2d-root"))
	servedBy := func(path, want string) {
		t.Helper()
		testkit.Eventually(t, waitFor, path+" served by "+want, func() bool {
			r, _ := getRetry(host, path, time.Second)
			return r.err == nil && r.status == http.StatusOK && r.body == hello(want)
		})
	}
	for _, c := range []struct{ path, want string }{
		{"/", "r2d-root"}, {"/apix", "r2d-root"}, {"/x/api", "r2d-root"},
		{"/api", "r2d-api"}, {"/api/", "r2d-api"}, {"/api/x", "r2d-api"}, {"/api/v2x", "r2d-api"},
		{"/api/v2", "r2d-v2"}, {"/api/v2/users/1", "r2d-v2"}, {"/api/%76%32/y", "r2d-v2"}, {"/x/../api/v2/y", "r2d-v2"},
	} {
		servedBy(c.path, c.want)
	}
	if err := cli.ContainerRemove(t.Context(), v2.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	servedBy("/api/v2/users/1", "r2d-api")
}
