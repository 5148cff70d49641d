package connection

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics, in Caddy's metrics registry (served at the admin API's
// /metrics, and by the metrics handler), named caddy_dicer_*. Every one is
// labelled by the daemon: kind (dicer, docker, swarm) and daemon (its address,
// never a token). The collectors are package-level, so counts survive
// config reloads, and registered into each config's registry.
var metrics = struct {
	eventsReceived *prometheus.CounterVec
	eventsApplied  *prometheus.CounterVec
	relists        *prometheus.CounterVec
	eventLatency   *prometheus.HistogramVec
	probes         *prometheus.CounterVec
	wakes          *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	noUpstream     *prometheus.CounterVec
	budgetRefused  *prometheus.CounterVec
	fleetErrors    *prometheus.CounterVec
	fleetCalls     *prometheus.CounterVec
	leasesRefused  *prometheus.CounterVec
	heals          *prometheus.CounterVec
	labelsRefused  *prometheus.CounterVec
	rollbacks      *prometheus.CounterVec
}{
	eventsReceived: counter("events_received_total", "Events received from the daemon's event stream.", "kind", "daemon"),
	eventsApplied: counter("events_applied_total",
		"Instance changes applied to the catalog from events (a burst of events about one instance counts once).", "kind", "daemon"),
	relists: counter("relists_total",
		"Full re-listings after a session that had listed ended, by why it ended: lost, fell_behind, stalled, unreachable, refused.",
		"kind", "daemon", "cause"),
	eventLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "dicer", Name: "event_to_catalog_seconds",
		Help:    "Time from an event's arrival to the catalog snapshot that holds its change (the instance fetched included).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"kind", "daemon"}),
	probes: counter("readiness_probes_total",
		"Readiness probes of instances without a health check (R1a), by result: accepted, timed_out.", "kind", "daemon", "result"),
	wakes: counter("wakes_total",
		"Instances woken for a request (scale to zero, R5), by result: requested (a request sent to an instance on standby, "+
			"which the daemon wakes), or what a wake Caddy makes itself (start, unpause) came to: "+
			"ready, exited, too_slow, denied, error, canceled.", "kind", "daemon", "result"),
	decisions: counter("permission_decisions_total",
		"On-demand TLS permission decisions (R7), by decision: allowed, denied.", "kind", "daemon", "decision"),
	noUpstream: counter("no_upstream_total",
		"Upstream lookups that found no instance to send the request to (answered 503 unless retried), by route.",
		"kind", "daemon", "route"),
	fleetErrors: counter("fleet_storage_errors_total",
		"Failed reads and writes of the storage a fleet of Caddys shares (R5m), by op: read (no instance is put on standby "+
			"meanwhile), write (a lease not renewed).", "kind", "daemon", "op"),
	fleetCalls: counter("fleet_storage_calls_total",
		"Calls the fleet makes of the storage a fleet of Caddys shares (R5m, R5j, R4e: leases, load, switches), by op: "+
			"store, load, delete, list, lock, unlock.", "kind", "daemon", "op"),
	leasesRefused: counter("fleet_leases_refused_total",
		"Leases of other Caddys refused as read from the fleet's storage (R5m), once per version of each, by reason: "+
			"future (dated ahead of this Caddy's clock: held one lease time at most from first read), corrupt "+
			"(unreadable, oversized or absurd: holds nothing).", "kind", "daemon", "reason"),
	heals: counter("heals_total",
		"Restarts of containers labelled caddy.heal that stayed unhealthy (R1e), by result: restarted, denied, error, "+
			"capped (due, but heal_max_restarts was reached: once per reach).", "kind", "daemon", "result"),
	labelsRefused: counter("foreign_labels_refused_total",
		"Instances whose caddy-docker-proxy or Traefik labels were refused, not routed (R2f), by set: caddy-docker-proxy, "+
			"traefik; once per instance and change of its refusal, as the warning.", "kind", "daemon", "set"),
	rollbacks: counter("rollbacks_total",
		"Rollouts rolled back (R4f): a step failed, or an operator aborted; counted by the Caddy that decided, by route.",
		"kind", "daemon", "route"),
	budgetRefused: counter("certificate_budget_refused_total",
		"On-demand certificates refused by an issuance budget (R7d), by budget: domain, instance, names.", "kind", "daemon", "budget"),
}

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caddy", Subsystem: "dicer", Name: name, Help: help}, labels)
}

// WakeRequested is the result label of caddy_dicer_wakes_total for a
// request sent to an instance on standby, whose daemon wakes it at the
// connection (Dicer). A wake Caddy makes itself (Docker: start or unpause)
// is counted with its standby.WakeResult: ready, exited, too_slow, denied,
// error, canceled.
const WakeRequested = "requested"

// Collectors are the package's metric collectors, to register into a
// registry: the counters, kept across config reloads, and the gauges of
// every connection open reports, read at each scrape.
func Collectors(open func() []*Conn) []prometheus.Collector {
	return []prometheus.Collector{
		metrics.eventsReceived, metrics.eventsApplied, metrics.relists, metrics.eventLatency,
		metrics.probes, metrics.wakes, metrics.decisions, metrics.noUpstream, metrics.budgetRefused, metrics.fleetErrors,
		metrics.fleetCalls, metrics.leasesRefused, metrics.heals, metrics.labelsRefused, metrics.rollbacks, eventsDropped,
		newStateCollector(open), poolMetrics.wakesStarted, &poolCollector{desc: poolInstances, open: open},
	}
}

// connMetrics are a connection's counters, resolved once for its labels.
type connMetrics struct {
	kind, daemon   string
	eventsReceived prometheus.Counter
	eventsApplied  prometheus.Counter
	eventLatency   prometheus.Observer
	probesAccepted prometheus.Counter
	probesTimedOut prometheus.Counter
}

func newConnMetrics(kind, daemon string) connMetrics {
	return connMetrics{
		kind: kind, daemon: daemon,
		eventsReceived: metrics.eventsReceived.WithLabelValues(kind, daemon),
		eventsApplied:  metrics.eventsApplied.WithLabelValues(kind, daemon),
		eventLatency:   metrics.eventLatency.WithLabelValues(kind, daemon),
		probesAccepted: metrics.probes.WithLabelValues(kind, daemon, "accepted"),
		probesTimedOut: metrics.probes.WithLabelValues(kind, daemon, "timed_out"),
	}
}

// countRefused counts an instance whose foreign labels were refused
// (R2f), by set. Only the Docker and Swarm adapters read foreign labels
// and set catalog.LabelRefused; a Dicer instance whose own labels carry
// one is not counted (its tenant would write the series).
func (c *Conn) countRefused(set string) {
	if c.kind == "docker" || c.kind == "swarm" {
		metrics.labelsRefused.WithLabelValues(c.kind, c.address, set).Inc()
	}
}

// Wakes is the counter of wakes with result (WakeRequested, or a
// standby.WakeResult) on the daemon; resolve it once for the request path.
func (c *Conn) Wakes(result string) prometheus.Counter { return c.metrics.wakes(result) }

// NoUpstream is the counter of lookups on route (its name) that found no
// instance; resolve it once for the request path.
func (c *Conn) NoUpstream(route string) prometheus.Counter {
	return metrics.noUpstream.WithLabelValues(c.kind, c.address, route)
}

// BudgetRefused is the counter of certificates refused by budget (R7d).
func (c *Conn) BudgetRefused(budget string) prometheus.Counter {
	return metrics.budgetRefused.WithLabelValues(c.kind, c.address, budget)
}

// fleetErrors is the counter of failed fleet storage operations op.
func (m connMetrics) fleetErrors(op string) prometheus.Counter {
	return metrics.fleetErrors.WithLabelValues(m.kind, m.daemon, op)
}

// fleetCalls is the counter of the fleet's storage calls op.
func (m connMetrics) fleetCalls(op string) prometheus.Counter {
	return metrics.fleetCalls.WithLabelValues(m.kind, m.daemon, op)
}

// leasesRefused is the counter of leases refused for reason.
func (m connMetrics) leasesRefused(reason string) prometheus.Counter {
	return metrics.leasesRefused.WithLabelValues(m.kind, m.daemon, reason)
}

// heals is the counter of heals with result on this daemon (R1e).
func (m connMetrics) heals(result string) prometheus.Counter {
	return metrics.heals.WithLabelValues(m.kind, m.daemon, result)
}

// wakes is the counter of wakes with result on this daemon.
func (m connMetrics) wakes(result string) prometheus.Counter {
	return metrics.wakes.WithLabelValues(m.kind, m.daemon, result)
}

// relisted counts a re-listing with its cause.
func (m connMetrics) relisted(cause string) {
	metrics.relists.WithLabelValues(m.kind, m.daemon, cause).Inc()
}

// applied records an event's change reaching the catalog.
func (m connMetrics) applied(received time.Time) {
	m.eventsApplied.Inc()
	m.eventLatency.Observe(time.Since(received).Seconds())
}

// DecisionCounters count a permission's decisions, resolved at provision
// so that a handshake only adds to one.
type DecisionCounters struct{ allowed, denied prometheus.Counter }

// Count adds a decision; the zero DecisionCounters (a permission not
// provisioned, in unit tests) counts none.
func (d *DecisionCounters) Count(allowed bool) {
	switch {
	case d.allowed == nil:
	case allowed:
		d.allowed.Inc()
	default:
		d.denied.Inc()
	}
}

// Decisions are the counters of a permission's decisions on c.
func (c *Conn) Decisions() DecisionCounters {
	return DecisionCounters{
		allowed: metrics.decisions.WithLabelValues(c.kind, c.address, "allowed"),
		denied:  metrics.decisions.WithLabelValues(c.kind, c.address, "denied"),
	}
}

// stateCollector reports, at each scrape, every open connection's state:
// caddy_dicer_connected, caddy_dicer_instances by state and
// caddy_dicer_routable_instances. Nothing is kept between scrapes, so a
// closed connection leaves no stale series.
type stateCollector struct {
	connected, instances, routable *prometheus.Desc
	open                           func() []*Conn
}

func newStateCollector(open func() []*Conn) *stateCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("caddy", "dicer", name), help, labels, nil)
	}
	return &stateCollector{
		connected: desc("connected", "1 while the daemon's events are followed, 0 while it is being (re)connected to.", "kind", "daemon"),
		instances: desc("instances", "Instances the daemon reported, by state.", "kind", "daemon", "state"),
		routable: desc("routable_instances",
			"Instances that get requests (R1-R4) on a route without settings, or on some route's port.", "kind", "daemon"),
		open: open,
	}
}

// Describe implements prometheus.Collector.
func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.connected
	ch <- s.instances
	ch <- s.routable
}

// Collect implements prometheus.Collector. Two connections to one daemon
// with different settings (another token, say) report once.
func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[2]string]bool{}
	for _, c := range s.open() {
		id := [2]string{c.kind, c.address}
		if seen[id] {
			continue
		}
		seen[id] = true
		connected := 0.0
		if c.status.snapshot().State == StateFollowing {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(s.connected, prometheus.GaugeValue, connected, c.kind, c.address)
		n := c.catalog.Counts()
		for state, count := range n.ByState {
			ch <- prometheus.MustNewConstMetric(s.instances, prometheus.GaugeValue, float64(count), c.kind, c.address, state)
		}
		ch <- prometheus.MustNewConstMetric(s.routable, prometheus.GaugeValue, float64(n.Routable), c.kind, c.address)
	}
}

// Interface guards
var _ prometheus.Collector = (*stateCollector)(nil)
