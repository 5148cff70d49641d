package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// Weights (R4c) and sticky sessions (R4d) through the in-process Caddy,
// on the test daemon. weights_docker_test.go does the same on the Engine.

// helloInstance is instance with the hello server answering
// hello(body) instead of the instance's name: a recreated instance
// answers under the same name with another body.
func helloInstance(t *testing.T, d *dicertest.Daemon, name, body, ip string, labels map[string]string) {
	t.Helper()
	l := map[string]string{"caddy.port": strconv.Itoa(dicertest.HelloPort(t, ip, body))}
	for k, v := range labels {
		l[k] = v
	}
	d.CreateInstance(&dicerpb.Instance{
		Name: name, Ip: ip, NetworkName: "default", Labels: l,
		State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
	})
}

// adminPost POSTs body to path on the in-process Caddy's admin endpoint.
func adminPost(t *testing.T, path, body string) (int, string) {
	t.Helper()
	res, err := http.Post(fmt.Sprintf("http://localhost:%d%s", adminPort, path), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// adminInstances is GET /dicer/instances, decoded.
func adminInstances(t *testing.T) []diceradmin.InstanceStatus {
	t.Helper()
	var list []diceradmin.InstanceStatus
	if err := json.Unmarshal([]byte(testkit.AdminGet(t, fmt.Sprintf("localhost:%d", adminPort), "/dicer/instances")), &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// routableAt waits until each named instance is routable at its address
// (name -> IP) in the admin API.
func routableAt(t *testing.T, want map[string]string) {
	t.Helper()
	eventually(t, fmt.Sprintf("instances routable at %v", want), func() bool {
		ok := 0
		for _, in := range adminInstances(t) {
			if ip, named := want[in.Name]; named && in.Routable && len(in.Networks) > 0 && in.Networks[0].Address == ip {
				ok++
			}
		}
		return ok == len(want)
	})
}

// countBodies sends n requests for host with workers at once on one
// keep-alive client and counts the answers by body.
func countBodies(t *testing.T, host string, n, workers int) map[string]int {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	c := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: client}
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				r := c.Get(context.Background(), host, "/")
				key := r.Body
				if r.Err != nil || r.Status != http.StatusOK {
					key = "failed: " + r.String()
				}
				mu.Lock()
				counts[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return counts
}

func TestCaddy_R4c_weights_split_and_change_at_runtime(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	helloInstance(t, d, "web-a", "web-a", "127.0.0.171", map[string]string{"app": "web", "caddy.weight": "90"})
	helloInstance(t, d, "web-b", "web-b", "127.0.0.172", map[string]string{"app": "web", "caddy.weight": "10"})
	tester, logFile := startCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%s
		}
		lb_policy dicer_weighted
	}
}`, httpPort, sock))
	routableAt(t, map[string]string{"web-a": "127.0.0.171", "web-b": "127.0.0.172"})

	// 90/10 over 20,000 requests: web-b's share 10% ± 1% (the binomial
	// spread is 0.2%).
	start := time.Now()
	counts := countBodies(t, "weights.test", 20000, 8)
	b := counts[hello("web-b")]
	share := float64(b) / 20000
	t.Logf("20,000 requests in %s: web-a %d, web-b %d (%.2f%%)", time.Since(start).Round(time.Millisecond), counts[hello("web-a")], b, 100*share)
	if counts[hello("web-a")]+b != 20000 || share < 0.09 || share > 0.11 {
		t.Fatalf("web-b got %.2f%% of 20,000 requests, want 10%% ± 1%%: %v", 100*share, counts)
	}

	loads := len(testkit.LogLines(t, logFile, "load complete"))

	// A runtime weight of 0: a warm spare, from the next request on.
	status, body := adminPost(t, "/dicer/weight", `{"instance": "web-b", "weight": 0}`)
	if status != http.StatusOK || !strings.Contains(body, `"weight": 0`) || !strings.Contains(body, `"runtime": true`) {
		t.Fatalf("POST /dicer/weight: %d %s", status, body)
	}
	if got := countBodies(t, "weights.test", 300, 4); got[hello("web-a")] != 300 {
		t.Fatalf("after web-b's weight 0: %v, want all 300 on web-a (a warm spare gets nothing while others serve)", got)
	}
	for _, in := range adminInstances(t) {
		if in.Name == "web-b" && (in.Weight != 0 || !in.RuntimeWeight) {
			t.Errorf("admin instances: web-b weight %d runtime %v, want 0 runtime", in.Weight, in.RuntimeWeight)
		}
	}

	// The warm spare serves when nothing else is routable.
	d.SetState("web-a", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	answers(t, tester, "weights.test", http.StatusOK, hello("web-b"))
	if got := countBodies(t, "weights.test", 100, 4); got[hello("web-b")] != 100 {
		t.Fatalf("web-a stopped: %v, want all 100 on the warm spare web-b", got)
	}
	d.SetState("web-a", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
	routableAt(t, map[string]string{"web-a": "127.0.0.171"})

	// Swap: web-a to 0, web-b cleared (its label's 10 again).
	for _, req := range []string{`{"instance": "web-a", "weight": 0}`, `{"selector": "app=web,caddy.weight=10", "clear": true}`} {
		if status, body := adminPost(t, "/dicer/weight", req); status != http.StatusOK {
			t.Fatalf("POST /dicer/weight %s: %d %s", req, status, body)
		}
	}
	if got := countBodies(t, "weights.test", 300, 4); got[hello("web-b")] != 300 {
		t.Fatalf("after web-a's weight 0 and web-b's cleared: %v, want all 300 on web-b", got)
	}
	if now := len(testkit.LogLines(t, logFile, "load complete")); now != loads {
		t.Errorf("config loads: %d before the weight changes, %d after; want none", loads, now)
	}

	// Refusals: no unknown instance is remembered, bad bodies are 400.
	for req, want := range map[string]int{
		`{"instance": "nobody", "weight": 3}`:            http.StatusNotFound,
		`{"instance": "web-a", "weight": 10001}`:         http.StatusBadRequest,
		`{"instance": "web-a"}`:                          http.StatusBadRequest,
		`{"weight": 3}`:                                  http.StatusBadRequest,
		`{"selector": "app in (", "weight": 3}`:          http.StatusBadRequest,
		`{"instance": "web-a", "weight": 3, "extra": 1}`: http.StatusBadRequest,
	} {
		if status, body := adminPost(t, "/dicer/weight", req); status != want {
			t.Errorf("POST /dicer/weight %s: %d %s, want %d", req, status, body, want)
		}
	}
}

// stickyClient is one user: its own cookie jar, and where it was last.
type stickyClient struct {
	client *http.Client
	at     string // the instance name in the last answer
	moves  int
}

// newStickyClients are n clients with their own cookie jars.
func newStickyClients(t *testing.T, n int) []*stickyClient {
	t.Helper()
	out := make([]*stickyClient, n)
	for i := range out {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &stickyClient{client: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	}
	return out
}

// visit sends one request for host (Caddy at addr), and says whether
// the answer came from another instance than the last (a session move).
// Bodies are "hello from <name> <generation>".
func (c *stickyClient) visit(t *testing.T, addr, host string) (body string) {
	t.Helper()
	r := testkit.Caddy{Addr: addr, Client: c.client}.Get(context.Background(), host, "/")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET %s: %s", host, r)
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(r.Body), "hello from "), " ")
	if c.at != "" && name != c.at {
		c.moves++
	}
	c.at = name
	if sc := r.Header.Get("Set-Cookie"); sc != "" && strings.Contains(sc, name) {
		t.Fatalf("cookie %q names the instance %s: clients could enumerate instances", sc, name)
	}
	return r.Body
}

func TestCaddy_R4d_sticky_sessions_survive_recreates(t *testing.T) {
	needsCaddy(t)
	d, sock := dicertest.OnSocket(t)
	names := []string{"web-1", "web-2", "web-3"}
	ip := func(gen, i int) string { return "127.0.0." + strconv.Itoa(181+10*gen+i) }
	deploy := func(gen int) map[string]string {
		at := map[string]string{}
		for i, name := range names {
			helloInstance(t, d, name, name+" gen"+strconv.Itoa(gen), ip(gen, i), map[string]string{"app": "web"})
			at[name] = ip(gen, i)
		}
		return at
	}
	at := deploy(0)
	startCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic dicer app=web {
			address unix:%s
		}
		lb_policy dicer_sticky
	}
}`, httpPort, sock))
	routableAt(t, at)
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)

	clients := newStickyClients(t, 100)
	per := map[string]int{}
	for _, c := range clients {
		c.visit(t, addr, "shop.test")
		c.visit(t, addr, "shop.test") // the cookie holds
		per[c.at]++
	}
	t.Logf("100 sessions: %v", per)
	if len(per) != 3 {
		t.Fatalf("sessions spread over %v, want all three instances", per)
	}

	// Recreated twice: new instances (new IDs, new addresses), same names.
	for gen := 1; gen <= 2; gen++ {
		for _, name := range names {
			d.DeleteInstance(name)
		}
		at = deploy(gen)
		routableAt(t, at)
		for _, c := range clients {
			if body := c.visit(t, addr, "shop.test"); !strings.HasSuffix(body, "gen"+strconv.Itoa(gen)+"\n") {
				t.Fatalf("generation %d: answered %q by an old instance", gen, body)
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

	// web-1 gone for good: its sessions move once, the others stay.
	d.DeleteInstance("web-1")
	eventually(t, "web-1 gone from the admin API", func() bool {
		for _, in := range adminInstances(t) {
			if in.Name == "web-1" {
				return false
			}
		}
		return true
	})
	for round := range 3 {
		for _, c := range clients {
			c.visit(t, addr, "shop.test")
		}
		t.Logf("after web-1 left, round %d", round)
	}
	for i, c := range clients {
		if c.moves > 1 {
			t.Errorf("client %d moved %d times, want at most once", i, c.moves)
		}
		if c.at == "web-1" {
			t.Errorf("client %d still on web-1", i)
		}
	}
	movedOnce := 0
	for _, c := range clients {
		movedOnce += c.moves
	}
	if movedOnce != per["web-1"] {
		t.Errorf("%d sessions moved, want exactly web-1's %d", movedOnce, per["web-1"])
	}

	// A forged or foreign cookie is a new session, with a new cookie.
	for _, forged := range []string{"web-2", "gen2", "AAAAAAAAAAAAAAAAAAAAAA"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Host = "shop.test"
		req.AddCookie(&http.Cookie{Name: "dicer_session", Value: forged})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.Header.Get("Set-Cookie") == "" {
			t.Errorf("cookie %q: no new cookie set; want it treated as a new session", forged)
		}
	}
}
