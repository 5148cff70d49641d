package caddydicer

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// Per-instance metrics (R13b): requests, errors, in flight and latency of
// each instance a route sent requests to, labelled kind, daemon, route and
// instance (its name, never its address). An upstream source does not see
// responses, and reverse_proxy has no hook after a response nor a
// transport we could wrap without the user's config (the handler sets its
// transport after provisioning its upstreams, and type-asserts it), so the
// request itself tells: GetUpstreams records what it returned
// (upstreams_identity.go), and when the request's context ends the record of the
// upstream reverse_proxy selected gives the instance, with the status
// and latency reverse_proxy left in its placeholders. A request's record
// waits among those of requests in flight (a lock-free stack: one
// compare-and-swap per request, no allocation, no goroutine) and is
// counted at the first sweep after its context ended: every scrape
// sweeps first, so what it reports is exact, and a goroutine sweeps once
// as many records were added as the last sweep kept for requests still in
// flight, and at least sweepEvery, so that a sweep visits each record
// about twice at most and the records of requests that ended stay few:
// each holds its request's replacer, which holds the request, until it
// is counted. In flight is
// reverse_proxy's own count of requests at the instance's dial address
// (one per instance: R1d), read at the scrape.
//
// The series of an instance goes at the next scrape after the instance
// left its daemon's catalog (and, without scrapes, at the next new
// series past twice the ones kept at the last pruning): a name reused by
// a recreated container continues its series.

// httpMetricsOn reports whether the config being loaded turns Caddy's own
// HTTP metrics on: the `metrics` global option (the http app's metrics),
// or a server's `metrics`. The http app is known, decoded, while its
// handlers are provisioned.
func httpMetricsOn(ctx caddy.Context) bool {
	a, err := ctx.AppIfConfigured("http")
	if err != nil {
		return false
	}
	app, ok := a.(*caddyhttp.App)
	if !ok {
		return false
	}
	if app.Metrics != nil {
		return true
	}
	for _, srv := range app.Servers {
		if srv.Metrics != nil {
			return true
		}
	}
	return false
}

// instanceKey names one series set.
type instanceKey struct{ kind, daemon, route, name string }

// instanceStats are one instance's counters on one route: atomics only, so
// that neither a request nor a scrape waits for the other.
type instanceStats struct {
	conn     *connection.Conn // whose catalog says whether the instance is still there
	requests atomic.Uint64
	errors   atomic.Uint64
	host     atomic.Pointer[reverseproxy.Host]
	count    atomic.Uint64
	sumBits  atomic.Uint64
	buckets  [len(latencyBuckets)]atomic.Uint64
}

// latencyBuckets are the upper bounds, in seconds, of the latency
// histogram: time to the response's headers.
var latencyBuckets = [...]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// record counts one attempt: status is the upstream's (0: none, a dial or
// transport error), latency its time to the response's headers.
func (st *instanceStats) record(status int, latency time.Duration) {
	st.requests.Add(1)
	if status == 0 || status >= 500 {
		st.errors.Add(1)
	}
	if status == 0 {
		return
	}
	sec := latency.Seconds()
	for i, le := range latencyBuckets {
		if sec <= le {
			st.buckets[i].Add(1)
			break
		}
	}
	for {
		old := st.sumBits.Load()
		if st.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+sec)) {
			break
		}
	}
	st.count.Add(1)
}

// learnHost keeps reverse_proxy's in-flight counter for the instance's
// dial address (nil until Caddy filled it in).
func (st *instanceStats) learnHost(h *reverseproxy.Host) {
	if h != nil && st.host.Load() != h {
		st.host.Store(h)
	}
}

// sourceObserved is what an upstream source labels its instances' series
// with, resolved at provision.
type sourceObserved struct {
	conn  *connection.Conn
	route string
}

// stats returns the counters of the instance named name on this route,
// made on its first request.
func (o sourceObserved) stats(name string) *instanceStats {
	return instanceSeries.get(instanceKey{o.conn.Kind(), o.conn.Address(), o.route, name}, o.conn)
}

// instanceSeries holds every instance's counters, package-level as the
// other collectors are, so that counts survive config reloads.
var instanceSeries = newInstanceCollector()

// instanceCollector is the prometheus.Collector of the per-instance
// series.
type instanceCollector struct {
	series  sync.Map // instanceKey -> *instanceStats
	n       atomic.Int64
	kept    atomic.Int64 // series kept at the last pruning
	pruning sync.Mutex   // one pruning at a time; never taken by a request

	pending  atomic.Pointer[pendingCount] // records of requests not yet counted
	since    atomic.Int64                 // records added since the last sweep began
	due      atomic.Int64                 // since at which a request starts the next sweep
	sweeping sync.Mutex                   // one sweep at a time; a request only tries it, and sweeps from a goroutine

	requests, errors, inFlight, latency *prometheus.Desc
}

func newInstanceCollector() *instanceCollector {
	labels := []string{"kind", "daemon", "route", "instance"}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("caddy", "dicer", name), help, labels, nil)
	}
	c := &instanceCollector{
		requests: desc("instance_requests_total", "Requests sent to the instance on the route (each attempt of a retried request counts)."),
		errors: desc("instance_errors_total",
			"Requests to the instance that failed: a 5xx status from the instance, or no response (a dial or transport error)."),
		inFlight: desc("instance_in_flight", "Requests in flight at the instance's dial address, as reverse_proxy counts them."),
		latency:  desc("instance_latency_seconds", "Time from sending a request to the instance to its response's headers."),
	}
	c.due.Store(sweepEvery)
	return c
}

// get returns the counters of key, made (for conn) if there are none.
func (c *instanceCollector) get(key instanceKey, conn *connection.Conn) *instanceStats {
	if v, ok := c.series.Load(key); ok {
		return v.(*instanceStats)
	}
	v, loaded := c.series.LoadOrStore(key, &instanceStats{conn: conn})
	if !loaded {
		if n := c.n.Add(1); n > 2*c.kept.Load()+64 {
			go c.prune()
		}
	}
	return v.(*instanceStats)
}

// sweepEvery is the fewest requests' records a sweep is started after,
// besides the sweep of each scrape: more when more requests are in
// flight (see sweepLocked).
const sweepEvery = 32

// pendingCount is a request's record waiting to be counted when ctx, the
// request's context, ends; next links the records pending.
type pendingCount struct {
	sv   *served
	ctx  context.Context
	next *pendingCount
}

// pend adds the record of a request, whose context is ctx, to those
// counted when it ends, and starts a sweep when one is due and none is
// under way.
func (c *instanceCollector) pend(sv *served, ctx context.Context) {
	p := &pendingCount{sv: sv, ctx: ctx}
	c.push(p, p)
	if c.since.Add(1) >= c.due.Load() && c.sweeping.TryLock() {
		go func() {
			defer c.sweeping.Unlock()
			c.sweepLocked()
		}()
	}
}

// push adds the records first..last, linked by next, to the pending ones.
func (c *instanceCollector) push(first, last *pendingCount) {
	for {
		old := c.pending.Load()
		last.next = old
		if c.pending.CompareAndSwap(old, first) {
			return
		}
	}
}

// sweep counts the records of the requests that ended since the last
// sweep, waiting for one under way. A scrape sweeps first.
func (c *instanceCollector) sweep() {
	c.sweeping.Lock()
	defer c.sweeping.Unlock()
	c.sweepLocked()
}

// sweepLocked takes every pending record, counts those whose request
// ended and puts the others back; the next sweep is due once as many
// records were added as it put back, and at least sweepEvery. c.sweeping
// is held.
func (c *instanceCollector) sweepLocked() {
	var first, last *pendingCount
	kept := int64(0)
	c.since.Store(0)
	for p := c.pending.Swap(nil); p != nil; {
		next := p.next
		p.next = nil
		if p.ctx.Err() != nil {
			p.sv.done()
		} else {
			if first == nil {
				last = p
			}
			p.next, first = first, p
			kept++
		}
		p = next
	}
	if first != nil {
		c.push(first, last)
	}
	c.due.Store(max(sweepEvery, kept))
}

// prune drops the series of instances no longer in their daemon's catalog,
// or whose connection closed. It returns the series kept.
func (c *instanceCollector) prune() int {
	if !c.pruning.TryLock() {
		return int(c.n.Load())
	}
	defer c.pruning.Unlock()
	open := map[*connection.Conn]bool{}
	for _, conn := range dicerapp.Connections() {
		open[conn] = true
	}
	live := map[*connection.Conn]map[string]struct{}{}
	kept := 0
	c.series.Range(func(k, v any) bool {
		key, st := k.(instanceKey), v.(*instanceStats)
		names, ok := live[st.conn]
		if !ok {
			names = map[string]struct{}{}
			if open[st.conn] {
				st.conn.Catalog().Names(names)
			}
			live[st.conn] = names
		}
		if _, ok := names[key.name]; !ok {
			c.series.Delete(k)
			c.n.Add(-1)
			return true
		}
		kept++
		return true
	})
	c.kept.Store(int64(kept))
	return kept
}

// Describe implements prometheus.Collector.
func (c *instanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.errors
	ch <- c.inFlight
	ch <- c.latency
}

// Collect implements prometheus.Collector: it counts the requests that
// ended, prunes, then reports every series kept. Its cost is one pass
// over the records of requests in flight, one over the instances of each
// daemon with series (under that catalog's writers' lock, which no
// request takes) and four metrics per series.
func (c *instanceCollector) Collect(ch chan<- prometheus.Metric) {
	c.sweep()
	c.prune()
	var buckets map[float64]uint64
	c.series.Range(func(k, v any) bool {
		key, st := k.(instanceKey), v.(*instanceStats)
		lv := []string{key.kind, key.daemon, key.route, key.name}
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(st.requests.Load()), lv...)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.errors.Load()), lv...)
		inFlight := 0
		if h := st.host.Load(); h != nil {
			inFlight = h.NumRequests()
		}
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight), lv...)
		buckets = make(map[float64]uint64, len(latencyBuckets))
		var cum uint64
		for i, le := range latencyBuckets {
			cum += st.buckets[i].Load()
			buckets[le] = cum
		}
		count := max(st.count.Load(), cum)
		ch <- prometheus.MustNewConstHistogram(c.latency, count, math.Float64frombits(st.sumBits.Load()), buckets, lv...)
		return true
	})
}

// Interface guards
var _ prometheus.Collector = (*instanceCollector)(nil)
