package engine

// The queue at capacity (R5q), through a real Caddy, against the repo's
// test daemon with a dicertest.Host: one instance, a process of this test
// binary serving slow hello answers, labelled caddy.max_requests=2, behind
// three routes (sites) whose queues differ.

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R5q: with caddy.max_requests=2, 4 concurrent slow requests are all
// served (2 of them waited in the queue, none answered 502 or 503); with
// queue_size 1, of 4 one is answered 503 with Retry-After at once and the
// other 3 are served; with queue_timeout 100ms, of 3 one-second requests
// the one that waited is answered 503 with Retry-After.
func TestCaddy_R5q_queue_at_capacity(t *testing.T) {
	needsCaddy(t)
	h, sock := testHost(t, 0)
	ip := "127.0.0.171"
	port := testkit.FreePort(t, ip)
	if _, err := h.Run(dicertest.InstanceSpec{Name: "queue-a", IP: ip, Port: port,
		Labels:  map[string]string{"caddy.host": "queue.test,tight.test,brief.test", "caddy.max_requests": "2"},
		Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port), Protocol: dicerpb.Protocol_PROTOCOL_TCP}}}); err != nil {
		t.Fatal(err)
	}
	site := func(host, settings string) string {
		return fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic dicer {
			address unix:%s
			%s
		}
	}
}`, host, httpPort, sock, settings)
	}
	tester, _ := startCaddy(t, "", site("queue.test", "")+site("tight.test", "queue_size 1")+
		site("brief.test", "queue_timeout 100ms"))
	for _, host := range []string{"queue.test", "tight.test", "brief.test"} {
		answers(t, tester, host, http.StatusOK, hello("queue-a"))
	}

	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: loadClient()}
	slow := func(host, d string) func() testkit.Result {
		return func() testkit.Result {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return caddy.Get(ctx, host, "/slow?d="+d)
		}
	}
	// statuses sorts the answers' statuses, checks each 200 is the
	// instance's and each 503 has a Retry-After.
	statuses := func(rs []testkit.Result) []int {
		t.Helper()
		var got []int
		for _, r := range rs {
			switch {
			case r.Err != nil:
				t.Errorf("request failed: %v", r.Err)
			case r.Status == http.StatusOK && r.Body != hello("queue-a"):
				t.Errorf("200 with %q, want queue-a's answer", r.Body)
			case r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "1":
				t.Errorf("503 with Retry-After %q, want 1: %s", r.Header.Get("Retry-After"), r)
			}
			got = append(got, r.Status)
		}
		sort.Ints(got)
		return got
	}
	// waited is how many requests were let in after a wait (the three
	// sites' routes share a name, and so their series).
	waited := func() float64 {
		return metric(t, "caddy_dicer_queue_wait_seconds_count") - metric(t, "caddy_dicer_queue_wait_seconds_bucket", `le="0"`)
	}

	// Default queue: 4 at once, 2 in flight, 2 wait and are served.
	before := waited()
	if got := statuses(testkit.Burst(4, slow("queue.test", "500ms"))); fmt.Sprint(got) != "[200 200 200 200]" {
		t.Fatalf("4 requests at max_requests=2: statuses %v, want all 200", got)
	}
	if n := waited() - before; n != 2 {
		t.Errorf("%v requests waited for a slot, want 2", n)
	}

	// queue_size 1: 2 in flight, 1 waits, 1 refused at once.
	full := metric(t, "caddy_dicer_queue_overflow_total", `reason="full"`)
	if got := statuses(testkit.Burst(4, slow("tight.test", "500ms"))); fmt.Sprint(got) != "[200 200 200 503]" {
		t.Fatalf("4 requests at max_requests=2, queue_size 1: statuses %v, want 3 200 and one 503", got)
	}
	if v := metric(t, "caddy_dicer_queue_overflow_total", `reason="full"`) - full; v != 1 {
		t.Errorf("caddy_dicer_queue_overflow_total{reason=full} grew by %v, want 1", v)
	}

	// queue_timeout 100ms: the one that waits is refused after it.
	timedOut := metric(t, "caddy_dicer_queue_overflow_total", `reason="timeout"`)
	rs := testkit.Burst(3, slow("brief.test", "1s"))
	if got := statuses(rs); fmt.Sprint(got) != "[200 200 503]" {
		t.Fatalf("3 one-second requests at max_requests=2, queue_timeout 100ms: statuses %v, want 2 200 and one 503", got)
	}
	for _, r := range rs {
		if r.Status == http.StatusServiceUnavailable && r.Took >= time.Second {
			t.Errorf("the refused request took %s: not refused at its queue_timeout", r.Took)
		}
	}
	if v := metric(t, "caddy_dicer_queue_overflow_total", `reason="timeout"`) - timedOut; v != 1 {
		t.Errorf("caddy_dicer_queue_overflow_total{reason=timeout} grew by %v, want 1", v)
	}
	if v := metric(t, "caddy_dicer_queue_depth"); v != 0 {
		t.Errorf("caddy_dicer_queue_depth = %v once all answered, want 0", v)
	}
}

// R5q with R5j on Dicer: pool-a, labelled caddy.max_requests=1 and
// caddy.soft_limit=5, never has more than one request in flight, so its
// soft limit alone would never grow the pool; three clients of slow
// requests queue, and the queue grows it: Caddy connects to pool-b's
// published port, the Host wakes it, and it serves, with no failed
// request.
func TestCaddy_R5q_the_queue_grows_a_soft_limit_pool(t *testing.T) {
	needsCaddy(t)
	h, sock := testHost(t, 200*time.Millisecond)
	host := "queuepool.test"
	names := []string{"pool-a", "pool-b"}
	for i, name := range names {
		ip := "127.0.0." + fmt.Sprint(175+i)
		port := testkit.FreePort(t, ip)
		if _, err := h.Run(dicertest.InstanceSpec{Name: name, IP: ip, Port: port, StandbyAfter: time.Minute,
			Labels:  map[string]string{"caddy.host": host, "caddy.soft_limit": "5", "caddy.max_requests": "1"},
			Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port), Protocol: dicerpb.Protocol_PROTOCOL_TCP}}}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := h.Standby(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	tester, _ := startCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, host, httpPort, sock))
	answers(t, tester, host, http.StatusOK, hello("pool-a"))

	caddy := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), Client: loadClient()}
	get := func() testkit.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return caddy.Get(ctx, host, "/slow?d=150ms")
	}
	served := func(r testkit.Result) bool {
		return r.Err == nil && r.Status == http.StatusOK && strings.HasPrefix(r.Body, "hello from pool-")
	}
	load := testkit.StartLoad(3, get, served)
	defer load.Stop() // also when the test fails
	grown := testkit.Until(20*time.Second, func() bool { return load.Served(hello("pool-b")) > 0 })
	load.Stop()
	if !grown {
		t.Fatalf("pool-b served nothing within 20 s of 3 clients queued at max_requests=1; woken by connections to %v; served %v",
			wokenByConnect(h, "pool-b"), load.Bodies())
	}
	if failed, first := load.Failed(); failed != 0 {
		t.Errorf("%d of %d requests failed, e.g. %v", failed, load.Total(), first)
	}
	if ports := wokenByConnect(h, "pool-b"); len(ports) != 1 {
		t.Errorf("pool-b woken by connections to %v, want one wake by a connection to its published port", ports)
	}
}
