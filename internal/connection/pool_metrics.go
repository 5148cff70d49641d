package connection

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// The metrics of pools that grow under load (R5j) and of dependencies
// woken first (R5k): why wakes start, and how many instances of each
// connection's pools run. Their labels are the connection's kind and
// daemon, and a cause or state from a fixed set.
var poolMetrics = struct {
	wakesStarted *prometheus.CounterVec
}{
	wakesStarted: counter("wakes_started_total",
		"Wakes Caddy started, by cause: request (a request found nothing routable, Docker scale to zero, R5), "+
			"load (every routable instance was past its caddy.soft_limit, R5j; on Dicer, the connection to the published "+
			"port of the instance on standby, which its daemon wakes; on Swarm, a replica added), dependency (an instance being woken "+
			"depends on it, R5k).", "kind", "daemon", "cause"),
}

var poolInstances = prometheus.NewDesc(prometheus.BuildFQName("caddy", "dicer", "pool_instances"),
	"Instances labelled caddy.soft_limit (pools that grow under load, R5j), by state: running (up, whether ready or "+
		"not yet) or standby.", []string{"kind", "daemon", "state"}, nil)

// wakesStarted is the counter of wakes started for cause.
func (m connMetrics) wakesStarted(cause standby.WakeCause) prometheus.Counter {
	return poolMetrics.wakesStarted.WithLabelValues(m.kind, m.daemon, string(cause))
}

// poolCollector reports caddy_dicer_pool_instances at each scrape, from
// every open connection's catalog; nothing is kept between scrapes.
type poolCollector struct {
	desc *prometheus.Desc
	open func() []*Conn
}

// Describe implements prometheus.Collector.
func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector. Two connections to one daemon
// report once.
func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[2]string]bool{}
	for _, c := range p.open() {
		id := [2]string{c.kind, c.address}
		if seen[id] {
			continue
		}
		seen[id] = true
		running, sleeping := c.catalog.PoolCounts()
		if running+sleeping == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(running), c.kind, c.address, "running")
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(sleeping), c.kind, c.address, "standby")
	}
}

// Interface guards
var _ prometheus.Collector = (*poolCollector)(nil)
