package caddydicer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// openTestConnection puts a connection with catalog c in the pool, as an
// open one is, until t ends.
func openTestConnection(t testing.TB, c *catalog.Catalog) *connection.Conn {
	conn := connection.Fixture{Kind: "dicer", Address: fmt.Sprintf("unix:///%s.sock", t.Name()), Catalog: c}.Conn()
	key := "observe-test\x00" + t.Name()
	if err := dicerapp.Adopt(key, conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dicerapp.Release(key) })
	return conn
}

// collect returns what one scrape of the per-instance collector reports.
func collect(c *instanceCollector) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	var out []prometheus.Metric
	go func() { c.Collect(ch); close(ch) }()
	for m := range ch {
		out = append(out, m)
	}
	return out
}

// R13b: a scrape reports four metrics per instance with series, and the
// series of an instance no longer in its catalog, or of a closed
// connection, go at the next scrape.
func TestInstanceCollector_R13b_prunes_gone_instances(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{{ID: "a", Name: "a", State: catalog.StateRunning}, {ID: "b", Name: "b", State: catalog.StateRunning}})
	conn := openTestConnection(t, c)
	closed := connection.Fixture{Kind: "dicer", Address: "unix:///closed.sock", Catalog: c}.Conn()
	col := newInstanceCollector()
	for _, n := range []string{"a", "b"} {
		col.get(instanceKey{conn.Kind(), conn.Address(), "r", n}, conn).record(200, time.Millisecond)
	}
	col.get(instanceKey{closed.Kind(), closed.Address(), "r", "a"}, closed).record(0, 0)
	if got := len(collect(col)); got != 2*4 {
		t.Fatalf("%d metrics, want 8 (two live instances)", got)
	}
	c.Delete("b")
	if got := len(collect(col)); got != 4 {
		t.Fatalf("%d metrics after b left, want 4", got)
	}
	if col.n.Load() != 1 {
		t.Errorf("%d series kept", col.n.Load())
	}
}

// BenchmarkInstanceScrape is a scrape of the per-instance series of 10k
// live instances: the cost the docs state (R13b).
func BenchmarkInstanceScrape(b *testing.B) {
	const n = 10000
	all := make([]catalog.Instance, n)
	for i := range all {
		all[i] = catalog.Instance{ID: fmt.Sprint(i), Name: fmt.Sprintf("web-%05d", i), State: catalog.StateRunning}
	}
	c := catalog.New(catalog.Options{})
	c.Replace(all)
	conn := openTestConnection(b, c)
	col := newInstanceCollector()
	for _, in := range all {
		col.get(instanceKey{conn.Kind(), conn.Address(), "r", in.Name}, conn).record(200, time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// R13b: a scrape takes no lock a request needs. While a scrape is blocked
// half-way (its reader stopped reading, as a slow scraper's connection
// does), requests are routed, recorded and end; the next scrape counts
// every one of them.
func TestInstanceCollector_R13b_scrape_blocks_no_request(t *testing.T) {
	conn := openTestConnection(t, benchCatalog(10)) // web-a..web-c serve shop.example.com
	src := benchSource(conn)
	src.observed = sourceObserved{conn: conn, route: "scrape-blocked"}
	src.countsInstances = true  // Caddy's metrics on (R13b)
	src.observed.stats("web-a") // the scrape has at least four metrics to send
	ch := make(chan prometheus.Metric)
	go func() { instanceSeries.Collect(ch); close(ch) }()
	<-ch // the scrape is under way, blocked on its next metric
	const n = 2 * sweepEvery
	sent := map[string]int{}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for range n {
			r, repl, cancel := caddyRequest("shop.example.com")
			ups, err := src.GetUpstreams(r)
			if err != nil || len(ups) == 0 {
				t.Errorf("GetUpstreams: %v, %d upstreams", err, len(ups))
				cancel()
				return
			}
			repl.Set("http.reverse_proxy.upstream.hostport", ups[0].Dial)
			repl.Set("http.reverse_proxy.status_code", 200)
			sent[repl.ReplaceAll("{dicer.upstream.name}", "")]++
			cancel()
		}
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d requests did not finish in %v while a scrape was blocked", n, 5*time.Second)
	}
	for range ch { // the scrape goes on and ends
	}
	collect(instanceSeries)
	for name, want := range sent {
		if got := src.observed.stats(name).requests.Load(); got != uint64(want) {
			t.Errorf("%s: %d requests counted, %d sent", name, got, want)
		}
	}
	if len(sent) == 0 {
		t.Error("no request named its instance")
	}
}

// R13b: without scrapes, the records of requests that ended are counted
// soon, however many requests are in flight: a sweep is due once as many
// records were added as the last one kept, and at least sweepEvery, so
// that few ended requests (and the replacers they hold) wait.
func TestInstanceCollector_R13b_sweeps_without_scrapes(t *testing.T) {
	c := newInstanceCollector()
	record := func(ctx context.Context) { c.pend(&served{repl: caddy.NewReplacer()}, ctx) }
	const inFlight = 3 * sweepEvery
	for range inFlight {
		record(t.Context())
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 * sweepEvery {
		record(ended)
		c.sweeping.Lock() // a sweep it started is over
		c.sweeping.Unlock()
	}
	live, waiting := 0, 0
	for p := c.pending.Load(); p != nil; p = p.next {
		if p.ctx.Err() == nil {
			live++
		} else {
			waiting++
		}
	}
	if live != inFlight || waiting >= inFlight {
		t.Errorf("%d records of requests in flight (want %d), %d of requests that ended wait (want fewer than %d)",
			live, inFlight, waiting, inFlight)
	}
}
