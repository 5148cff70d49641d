//go:build e2e && linux

package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// readOnlyProxy serves the manager's Engine API over TCP on the bridge,
// passing GET and HEAD only (what the plugin needs: it only reads) and
// answering anything else 403; it records what it passed and refused.
type readOnlyProxy struct {
	addr    string
	handler http.Handler
	mu      sync.Mutex
	srv     *http.Server
	passed  map[string]bool // "GET /services", API version stripped
	refused []string
	last    time.Time // when the last request came
}

func startReadOnlyProxy(t *testing.T) *readOnlyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", managerAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	p := &readOnlyProxy{addr: ln.Addr().String(), passed: map[string]bool{}}
	t.Cleanup(p.stop)
	engine := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/docker.sock")
		}},
		FlushInterval: -1, // the event stream
	}
	p.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v1.") && i > 0 {
			path = path[i+1:]
		}
		what := r.Method + " " + path
		p.mu.Lock()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			p.refused = append(p.refused, what)
			p.mu.Unlock()
			http.Error(w, "read-only", http.StatusForbidden)
			return
		}
		p.passed[what] = true
		p.last = time.Now()
		p.mu.Unlock()
		engine.ServeHTTP(w, r)
	})
	p.serve(ln)
	return p
}

func (p *readOnlyProxy) serve(ln net.Listener) {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: p.handler}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// stop closes the proxy and every connection through it (the event
// stream too): the manager's API is gone for Caddy.
func (p *readOnlyProxy) stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// restart listens again at the same address.
func (p *readOnlyProxy) restart(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("the read-only proxy listening again at %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// lastRequest returns when the proxy last passed a request.
func (p *readOnlyProxy) lastRequest() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// getVia sends GET / for host to the Caddy at addr.
func getVia(ctx context.Context, addr, host string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// Caddy on a worker, which cannot list services itself, follows the
// manager's Engine API over TCP, through a proxy that passes reads only:
// it routes to the tasks on all three nodes, and never needed more than
// GET.
func TestClusterCaddyOnAWorker(t *testing.T) {
	proxy := startReadOnlyProxy(t)
	dir := t.TempDir()
	conf := strings.Replace(caddyfile, "\t\tdynamic swarm\n", "\t\tdynamic swarm {\n\t\t\taddress tcp://"+proxy.addr+"\n\t\t}\n", 1)
	if conf == caddyfile {
		t.Fatal("the Caddyfile has no `dynamic swarm` line to give an address")
	}
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	image, err := buildImage("caddy-worker", caddyDockerfile, map[string]string{"caddy": caddyBin, "Caddyfile": filepath.Join(dir, "Caddyfile")})
	if err != nil {
		t.Fatal(err)
	}
	if err := copyImages(1, image); err != nil {
		t.Fatal(err)
	}
	// A worker knows an overlay network only once a task of its own is on
	// it: the service comes first.
	s := createService(t, "worker", helloV1, "--mode", "global")
	ts := waitRunning(t, s, 3, everyNode()...)
	name := caddyName + "-worker"
	if out, err := nodeDocker(1, time.Minute, "run", "--detach", "--name", name, "--network", network,
		"--publish", nodeAddr(1)+"::80", image); err != nil {
		t.Fatalf("starting Caddy on %s: %v\n%s", nodeName(1), err, out)
	}
	t.Cleanup(func() { _, _ = nodeDocker(1, time.Minute, "rm", "--force", name) })
	out, err := nodeDocker(1, 30*time.Second, "port", name, "80/tcp")
	if err != nil {
		t.Fatalf("docker port: %v\n%s", err, out)
	}
	addr := strings.TrimSpace(strings.Split(out, "\n")[0])

	want := slices.Sorted(keys(ts))
	deadline := time.Now().Add(time.Minute)
	for {
		byHost := map[string]int{}
		failed := 0
		for range 30 {
			status, body, err := getVia(context.Background(), addr, s.host)
			if err != nil || status != 200 {
				failed++
				continue
			}
			byHost[strings.TrimPrefix(body, "hello from ")]++
		}
		if failed == 0 && slices.Equal(slices.Sorted(keys(byHost)), want) {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := nodeDocker(1, 30*time.Second, "logs", "--tail", "30", name)
			t.Fatalf("Caddy on %s: served by %v (%d failed), want %v; its log:\n%s", nodeName(1), byHost, failed, want, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The manager's API away for 5s (Caddy's connection to it refused),
	// then back, under load, three times: the routes are kept meanwhile,
	// and Caddy's connection comes back by the connect pace (TCP: capped
	// at 15s).
	var sent, failed int
	var backs []time.Duration
	for round := range rounds {
		l := startLoadVia(addr, s.host, 4)
		time.Sleep(300 * time.Millisecond)
		proxy.stop()
		time.Sleep(5 * time.Second)
		proxy.restart(t)
		back := time.Now()
		var relisted time.Time
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if at := proxy.lastRequest(); at.After(back) {
				relisted = at
				break
			}
		}
		n, f, failures := count(l.end())
		sent, failed = sent+n, failed+f
		t.Logf("round %d: manager API away 5s: %d requests, %d failed %v; Caddy back at the manager %v after its return",
			round+1, n, f, failures, relisted.Sub(back).Round(time.Millisecond))
		if f != 0 {
			t.Errorf("round %d: %d of %d requests failed while the manager's API was away", round+1, f, n)
		}
		if relisted.IsZero() {
			t.Fatalf("round %d: Caddy never came back to the manager's API within 30s", round+1)
		}
		backs = append(backs, relisted.Sub(back))
		// Let the session settle (it is listed and following again)
		// before the next outage.
		time.Sleep(time.Second)
	}
	slices.Sort(backs)
	t.Logf("SUMMARY manager API away 5s (Caddy on a worker, TCP): %d runs, %d requests, %d failed (routes kept); its return -> Caddy back at the manager median %v max %v",
		rounds, sent, failed, backs[len(backs)/2].Round(time.Millisecond), backs[len(backs)-1].Round(time.Millisecond))

	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	t.Logf("Caddy on a worker, following the manager at tcp://%s, used: %v", proxy.addr, slices.Sorted(keys(proxy.passed)))
	if len(proxy.refused) > 0 {
		t.Errorf("Caddy asked the manager for more than reads: %v", proxy.refused)
	}
}

// nodeAddr is worker i's address on the bridge.
func nodeAddr(i int) string { return fmt.Sprintf("10.213.77.%d", 10+i) }
