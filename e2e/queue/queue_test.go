//go:build e2e && linux

package queue

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// queueSites is the Caddyfile: Caddy's admin (and its /metrics) on admin,
// two sites on httpPort routed by the containers' caddy.host labels to
// port 8080, whose queues differ: roomy (queue_size 3, queue_timeout 5s)
// and brief (queue_timeout 300ms). flush_interval -1: a streamed answer's
// first byte reaches the client at once.
func queueSites(admin, httpPort int, roomy, brief string) string {
	site := func(host, settings string) string {
		return fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic docker {
			port 8080
			%s
		}
		flush_interval -1
	}
}
`, host, httpPort, settings)
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	http_port %d
	auto_https off
}
`, admin, httpPort) + site(roomy, "queue_size 3\n\t\t\tqueue_timeout 5s") + site(brief, "queue_timeout 300ms")
}

// R5q through a real Caddy (xcaddy) on the real Engine: a container
// labelled caddy.max_requests=1 holds one request in flight (a stream);
// three more wait in the queue, sent one after another once the queue
// shows the one before; they are answered 200 by the container, in the
// order they came, within queue_timeout; a fifth, the queue full (its
// queue_size 3), is answered 503 with Retry-After at once; on the site
// with queue_timeout 300ms a request behind a long one is answered 503
// with Retry-After after about 300 ms. Caddy's metrics endpoint shows the
// depth, the waits and the overflows.
//
// The clients keep their connections open (as many idle as there are
// clients): see the open finding below for what a client closing its
// connection at the end of an answer does.
func TestDockerCaddy_R5q_queue_at_capacity(t *testing.T) {
	queueAtCapacity(t, "queue", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}})
}

// R5q: with Go's default client, which keeps 2 idle connections per host
// and closes the others as their answers end, a request that ends by its
// client closing the connection frees its slot (its context ends) before
// reverse_proxy has counted it done; the request the queue lets in then
// must not find the instance full by reverse_proxy's count: it was
// answered reverse_proxy's own 503 "no upstreams available", without
// Retry-After, in 3 runs of 5 (review s49), before a request let in by the
// queue got one more than the limit in reverse_proxy's count.
func TestDockerCaddy_R5q_a_closing_client_hands_on_its_slot(t *testing.T) {
	queueAtCapacity(t, "queue-closing", &http.Client{})
}

func queueAtCapacity(t *testing.T, name string, client *http.Client) {
	roomy, brief := dockertest.Name(name)+".test", dockertest.Name(name+"-brief")+".test"
	dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: map[string]string{
		"caddy.host": roomy + "," + brief, "caddy.max_requests": "1"}})
	admin, httpPort := testkit.FreePort(t, "127.0.0.1"), testkit.FreePort(t, "127.0.0.1")
	p := testkit.CaddyProcess{Name: name, Bin: caddyBin, Home: t.TempDir(), Admin: admin}
	p.Config = filepath.Join(p.Home, "Caddyfile")
	if err := os.WriteFile(p.Config, []byte(queueSites(admin, httpPort, roomy, brief)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start(t)
	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: client}
	hello := "hello from " + name + "\n"
	for _, host := range []string{roomy, brief} {
		testkit.Eventually(t, 20*time.Second, "Caddy routes "+host, func() bool {
			return caddy.GetWithin(host, 2*time.Second).Is(http.StatusOK, hello)
		})
	}
	metric := func(name string, labels ...string) float64 {
		return testkit.MetricSum(t, adminGet(t, admin, "/metrics"), name, labels...)
	}
	waited := func() float64 { // requests let in after a wait
		return metric("caddy_dicer_queue_wait_seconds_count") - metric("caddy_dicer_queue_wait_seconds_bucket", `le="0"`)
	}
	depthIs := func(n float64) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("caddy_dicer_queue_depth %v", n), func() bool {
			return metric("caddy_dicer_queue_depth") == n
		})
	}
	// hold starts a streamed request (2 s) for host and returns once its
	// answer began: it holds the container's one slot; wait waits for its
	// end.
	hold := func(host string) (wait func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+caddy.Addr+"/drip?n=40&every=50ms", nil)
		req.Host = host
		res, err := caddy.Client.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			cancel()
			t.Fatalf("the holding stream for %s: %v %v", host, res, err)
		}
		buf := make([]byte, 1)
		if _, err := io.ReadFull(res.Body, buf); err != nil {
			cancel()
			t.Fatalf("the holding stream's first byte: %v", err)
		}
		return func() {
			defer cancel()
			defer res.Body.Close()
			rest, err := io.ReadAll(res.Body)
			if err != nil || len(rest) != 39 {
				t.Errorf("the holding stream: %d of 40 bytes, %v", len(rest)+1, err)
			}
		}
	}

	// The roomy site: one in flight, three queued in order, one refused.
	waitedBefore, fullBefore := waited(), metric("caddy_dicer_queue_overflow_total", `reason="full"`)
	depthIs(0)
	release := hold(roomy)
	type answer struct {
		r   testkit.Result
		end time.Time
	}
	answers := make([]answer, 3)
	var wg sync.WaitGroup
	sent := time.Now()
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := caddy.Get(ctx, roomy, "/slow?d=100ms")
			answers[i] = answer{r, time.Now()}
		}()
		depthIs(float64(i + 1)) // the next is sent once this one waits
	}
	refused := caddy.GetWithin(roomy, 5*time.Second)
	if refused.Status != http.StatusServiceUnavailable || refused.Header.Get("Retry-After") != "1" {
		t.Errorf("a request to the full queue: %s, Retry-After %q; want 503 with Retry-After 1", refused, refused.Header.Get("Retry-After"))
	}
	if refused.Took > time.Second {
		t.Errorf("the full queue's refusal took %s: not at once", refused.Took)
	}
	release()
	wg.Wait()
	for i, a := range answers {
		switch {
		case !a.r.Is(http.StatusOK, hello):
			t.Errorf("queued request %d: %s, want 200 from the container", i, a.r)
		case a.r.Took >= 5*time.Second:
			t.Errorf("queued request %d took %s, past queue_timeout 5s", i, a.r.Took)
		case i > 0 && !a.end.After(answers[i-1].end):
			t.Errorf("queued request %d was answered before %d: not first in, first out", i, i-1)
		}
	}
	t.Logf("3 queued behind a 2 s stream: answered %s, %s, %s after they were sent",
		answers[0].end.Sub(sent).Round(time.Millisecond), answers[1].end.Sub(sent).Round(time.Millisecond), answers[2].end.Sub(sent).Round(time.Millisecond))
	if n := waited() - waitedBefore; n != 3 {
		t.Errorf("caddy_dicer_queue_wait_seconds counted %v requests let in after a wait, want 3", n)
	}
	if n := metric("caddy_dicer_queue_overflow_total", `reason="full"`) - fullBefore; n != 1 {
		t.Errorf("caddy_dicer_queue_overflow_total{reason=full} grew by %v, want 1", n)
	}
	depthIs(0)

	// The brief site: a request behind a 2 s stream leaves at 300 ms.
	timeoutBefore := metric("caddy_dicer_queue_overflow_total", `reason="timeout"`)
	release = hold(brief)
	late := caddy.GetWithin(brief, 10*time.Second)
	release()
	if late.Status != http.StatusServiceUnavailable || late.Header.Get("Retry-After") != "1" {
		t.Errorf("a request past queue_timeout: %s, Retry-After %q; want 503 with Retry-After 1", late, late.Header.Get("Retry-After"))
	}
	if late.Took < 300*time.Millisecond || late.Took > 1500*time.Millisecond {
		t.Errorf("the request past queue_timeout 300ms was answered after %s", late.Took)
	}
	if n := metric("caddy_dicer_queue_overflow_total", `reason="timeout"`) - timeoutBefore; n != 1 {
		t.Errorf("caddy_dicer_queue_overflow_total{reason=timeout} grew by %v, want 1", n)
	}
	if !strings.Contains(adminGet(t, admin, "/metrics"), "caddy_dicer_queue_depth{") {
		t.Error("Caddy's metrics endpoint has no caddy_dicer_queue_depth series")
	}
}

// adminGet GETs path from Caddy's admin endpoint.
func adminGet(t *testing.T, admin int, path string) string {
	t.Helper()
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", admin, path))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
