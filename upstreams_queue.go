package caddydicer

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
	"github.com/caddy-dicer/caddy-dicer/internal/queue"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// QueueSettings are a route's settings of its queue at capacity (R5q):
// a request that finds every routable instance of the route at its
// limit of requests in flight (the instance's `caddy.max_requests`
// label, else max_requests) waits for a slot, first in, first out, and
// is let in the moment a request of the route ends. A full queue or a
// wait past queue_timeout is answered 503 with `Retry-After: 1`. See
// docs/scale-to-zero.md, "Queue at capacity".
type QueueSettings struct {
	// MaxRequests is how many requests an instance of the route takes
	// in flight at once when it has no `caddy.max_requests` label, from 1
	// to 100000. Default: none, so that only labelled instances have a
	// limit; a route queues only while every routable instance has one.
	// Example: `8`.
	MaxRequests int `json:"max_requests,omitempty"`

	// QueueSize is how many requests of the route may wait at once, from
	// 1 to 100000; one more is answered 503 at once. Default: `100`.
	QueueSize int `json:"queue_size,omitempty"`

	// QueueTimeout is how long a request waits at most for a slot before
	// it is answered 503. Default: `10s`.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`

	queue    *hostQueues
	queueObs queueObserved
}

// hostQueues are a route's queues, one per group of hosts it serves
// (R5q, catalog.Snapshot.HostGroup): a host an instance lists exactly is
// a group of its own; the names under one caddy.host wildcard are one
// group, and so are the names a selector route's instances without
// caddy.host serve: those are served by the same instances whatever the
// name, so an outsider sending many names makes no more queues, nor more
// slots on those instances, than one. A host's requests wait for a slot
// on its group's instances only, so a tenant whose host is at its limit,
// or an outsider holding its slots, holds no other tenant's host on the
// route. A group's queue is made at its first request and dropped when no
// request is in it or waiting, so there are never more than the groups
// with requests at that moment, and at most maxHostQueues: past that, a
// new group's requests go straight to Caddy's own count of each
// instance's requests in flight (MaxRequests), which passes over an
// instance at its limit.
type hostQueues struct {
	opts queue.Options
	mu   sync.Mutex
	m    map[hostGroup]*hostQueue
	// used is len(m), read without the lock: a route whose hosts have
	// no limit takes no lock per request.
	used atomic.Int32
}

// hostGroup is a group of hosts: a host, a wildcard's suffix, or "" (any
// other name of a selector route).
type hostGroup struct {
	name     string
	wildcard bool
}

// hostQueue is one group's queue and how many requests use it.
type hostQueue struct {
	*queue.Queue
	users int // requests let in or waiting; the queue goes at 0
}

// maxHostQueues bounds the queues of one route at once.
const maxHostQueues = 10_000

// take returns host's queue, made if need be, counted as used once more;
// nil when the route has maxHostQueues queues already.
func (h *hostQueues) take(host hostGroup) *hostQueue {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.m[host]
	if q == nil {
		if len(h.m) >= maxHostQueues {
			return nil
		}
		q = &hostQueue{Queue: queue.New(h.opts)}
		h.m[host] = q
		h.used.Store(int32(len(h.m)))
	}
	q.users++
	return q
}

// done ends one use of host's queue q, and drops it with its last.
func (h *hostQueues) done(host hostGroup, q *hostQueue) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q.users--; q.users == 0 && h.m[host] == q {
		delete(h.m, host)
		h.used.Store(int32(len(h.m)))
	}
}

// unlimit lets every request waiting in host's queue in: the host has an
// instance without a limit now. It takes no lock while the route has no
// queue in use.
func (h *hostQueues) unlimit(host hostGroup) {
	if h.used.Load() == 0 {
		return
	}
	h.mu.Lock()
	q := h.m[host]
	h.mu.Unlock()
	if q != nil {
		q.SetCapacity(0)
	}
}

// Waiting is how many requests of the route wait now, all hosts together.
func (h *hostQueues) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, q := range h.m {
		n += q.Waiting()
	}
	return n
}

// InFlight is how many requests the route's queues let in are in flight.
func (h *hostQueues) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, q := range h.m {
		n += q.InFlight()
	}
	return n
}

// Defaults and bounds of the queue settings.
const (
	defaultQueueSize    = 100
	maxQueueSize        = 100_000
	defaultQueueTimeout = 10 * time.Second
	// queueRetryAfter is the Retry-After, in seconds, of a request the
	// queue refused.
	queueRetryAfter = 1
)

// queuedVar is the request variable that says the request holds a slot
// of its route's queue, so that a retry of reverse_proxy does not take
// another.
const queuedVar = "dicer.queued"

// queueObserved is the route's series of the queue metrics.
type queueObserved struct {
	// route and size name the route and its queue's bound in the
	// dicer_queue_overflow event (R13e).
	route    string
	size     int
	depth    prometheus.Gauge
	wait     prometheus.Observer
	full     prometheus.Counter
	timedOut prometheus.Counter
}

// The queue's metrics (R5q), labelled like caddy_dicer_no_upstream_total:
// package-level, so counts survive config reloads, and registered into
// each config's registry.
var queueMetrics = struct {
	depth    *prometheus.GaugeVec
	wait     *prometheus.HistogramVec
	overflow *prometheus.CounterVec
}{
	depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "dicer", Name: "queue_depth",
		Help: "Requests waiting in the route's queue for a slot on one of its instances (R5q).",
	}, []string{"kind", "daemon", "route"}),
	wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "dicer", Name: "queue_wait_seconds",
		Help:    "Time requests of a route under a max_requests limit waited for a slot before they were let in (0 for those let in at once) (R5q).",
		Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"kind", "daemon", "route"}),
	overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "dicer", Name: "queue_overflow_total",
		Help: "Requests answered 503 by the route's queue (R5q), by reason: full (queue_size waiting already), timeout (no slot within queue_timeout).",
	}, []string{"kind", "daemon", "route", "reason"}),
}

// queueCollectors are the collectors to register with each config.
func queueCollectors() []prometheus.Collector {
	return []prometheus.Collector{queueMetrics.depth, queueMetrics.wait, queueMetrics.overflow}
}

// provisionQueue checks the settings and makes the route's queue, its
// series labelled with the daemon and route name.
func (q *QueueSettings) provisionQueue(kind, daemon, route string) error {
	if q.MaxRequests < 0 || q.MaxRequests > catalog.MaxMaxRequests {
		return setting.Errorf("max_requests", "%d is not a whole number from 1 to %d", q.MaxRequests, catalog.MaxMaxRequests)
	}
	if q.QueueSize < 0 || q.QueueSize > maxQueueSize {
		return setting.Errorf("queue_size", "%d is not a whole number from 1 to %d", q.QueueSize, maxQueueSize)
	}
	if q.QueueTimeout < 0 {
		return setting.Errorf("queue_timeout", "%s is negative", time.Duration(q.QueueTimeout))
	}
	size, timeout := q.QueueSize, time.Duration(q.QueueTimeout)
	if size == 0 {
		size = defaultQueueSize
	}
	if timeout == 0 {
		timeout = defaultQueueTimeout
	}
	q.queueObs = queueObserved{
		route:    route,
		size:     size,
		depth:    queueMetrics.depth.WithLabelValues(kind, daemon, route),
		wait:     queueMetrics.wait.WithLabelValues(kind, daemon, route),
		full:     queueMetrics.overflow.WithLabelValues(kind, daemon, route, "full"),
		timedOut: queueMetrics.overflow.WithLabelValues(kind, daemon, route, "timeout"),
	}
	depth := q.queueObs.depth
	q.queue = &hostQueues{opts: queue.Options{Size: size, Timeout: timeout, Depth: func(delta int) { depth.Add(float64(delta)) }},
		m: make(map[hostGroup]*hostQueue)}
	return nil
}

// unmarshalQueueSetting reads max_requests, queue_size or queue_timeout,
// if the dispenser is at one (ok).
func (q *QueueSettings) unmarshalQueueSetting(d *caddyfile.Dispenser, seen map[string]bool) (ok bool, err error) {
	name, ok, err := settingAt(d, seen, "max_requests", "queue_size", "queue_timeout")
	if !ok || err != nil {
		return ok, err
	}
	var raw string
	if err := oneValue(d, &raw); err != nil {
		return true, err
	}
	switch name {
	case "max_requests", "queue_size":
		bound := catalog.MaxMaxRequests
		if name == "queue_size" {
			bound = maxQueueSize
		}
		n, ok := wholeNumber(raw, bound)
		if !ok {
			return true, settingErrf(d, name, "%q is not a whole number from 1 to %d", raw, bound)
		}
		if name == "max_requests" {
			q.MaxRequests = n
		} else {
			q.QueueSize = n
		}
	default:
		dur, err := caddy.ParseDuration(raw)
		if err != nil || dur <= 0 {
			return true, settingErrf(d, name, "%q is not a positive duration (e.g. 10s)", raw)
		}
		q.QueueTimeout = caddy.Duration(dur)
	}
	return true, nil
}

// wholeNumber parses raw as a whole number from 1 to bound.
func wholeNumber(raw string, bound int) (int, bool) {
	n := 0
	if raw == "" || len(raw) > 7 {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n >= 1 && n <= bound
}

// admit is GetUpstreams for a route with routable targets in snap under a
// limit of requests in flight (R5q): it lets r in at once while the
// route has a free slot and nobody waits, else queues it, first in,
// first out, and then picks the targets afresh (the route may have
// changed meanwhile). While r waits, the route's pool grows (R5j, the
// queue loads it). It returns the targets to send r to, and the snapshot
// they come from; or, when the queue refused it, the upstream that
// answers 503 with Retry-After (refused). A request that holds a slot
// already (a retry), and a route with an instance without a limit, pass.
func (s *upstreamSource) admit(r *http.Request, snap *catalog.Snapshot, route catalog.Route, host string, targets []catalog.Target) (
	_ *catalog.Snapshot, _ []catalog.Target, refused []*reverseproxy.Upstream,
) {
	capacity := catalog.Capacity(targets, s.MaxRequests)
	if s.queue == nil {
		return snap, targets, nil
	}
	var group hostGroup
	group.name, group.wildcard = snap.HostGroup(route, host)
	if capacity == 0 { // a host without a limit (now): its requests never wait
		s.queue.unlimit(group)
		return snap, targets, nil
	}
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if vars != nil && vars[queuedVar] != nil {
		return snap, targets, nil
	}
	q := s.queue.take(group)
	if q == nil {
		return snap, targets, nil // past maxHostQueues: Caddy's own count of each instance
	}
	grow := func() {
		catalog.MarkQueued(targets)
		s.conn.Grow(snap, s.route, host, targets) // R5j: the queue's depth is load
	}
	waited, err := q.Enter(r.Context(), capacity, grow)
	if err != nil {
		waiting := q.Waiting() // the host's group's queue, which max_queued bounds
		s.queue.done(group, q)
		return snap, nil, s.refuse(r, err, waiting)
	}
	if vars != nil {
		vars[queuedVar] = true
	}
	context.AfterFunc(r.Context(), func() { // the slot is handed on as the request ends
		q.Leave()
		s.queue.done(group, q)
	})
	s.queueObs.wait.Observe(waited.Seconds())
	if waited == 0 {
		return snap, targets, nil
	}
	snap = s.conn.Catalog().Snapshot()
	targets, _ = snap.Pick(targets[:0], route, host, false)
	return snap, targets, nil
}

// refuse answers a request the queue did not let in: 503 with
// Retry-After, unless the client left (no answer); waiting is how many
// wait in its host's queue.
func (s *upstreamSource) refuse(r *http.Request, err error, waiting int) []*reverseproxy.Upstream {
	switch {
	case errors.Is(err, queue.ErrFull):
		s.queueObs.full.Inc()
		if s.conn != nil { // nil: not provisioned (unit tests)
			s.conn.QueueOverflow(s.queueObs.route, r.Host, waiting, s.queueObs.size) // R13e
		}
	case errors.Is(err, queue.ErrTimeout):
		s.queueObs.timedOut.Inc()
	default:
		return nil // the client left
	}
	if s.logger != nil { // nil: not provisioned (unit tests)
		if c := s.logger.Check(zap.DebugLevel, "request refused by the route's queue"); c != nil {
			c.Write(zap.String("host", r.Host), zap.Error(err))
		}
	}
	u := s.page(r, s.logger, pages.Data{Kind: pages.KindUnavailable, Host: r.Host,
		Message: "The service is at capacity.", RetryAfter: queueRetryAfter, Refresh: queueRetryAfter})
	if u == nil {
		return nil
	}
	return []*reverseproxy.Upstream{u}
}

// limitUpstreams gives each of ups, made from targets, its instance's
// limit (R5q), so that reverse_proxy's selection passes over an instance
// at its limit by its own count of requests in flight (an instance
// listing several hosts takes requests from each host's queue). A request
// the queue let in gets one more: the queue counts the slots, and the
// request whose end freed this one may still be counted by reverse_proxy
// (a client that closes its connection ends its request's context, which
// frees the slot, before reverse_proxy uncounts it); at the limit itself,
// the request let in would find every instance full and get
// reverse_proxy's own 503, without Retry-After.
func (s *upstreamSource) limitUpstreams(r *http.Request, ups []*reverseproxy.Upstream, targets []catalog.Target) {
	extra := 0
	if vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any); vars != nil && vars[queuedVar] != nil {
		extra = 1
	}
	for i, t := range targets {
		n := int(t.MaxRequests)
		if n == 0 {
			n = s.MaxRequests
		}
		ups[i].MaxRequests = n + extra
	}
}
