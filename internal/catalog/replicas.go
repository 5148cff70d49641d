package catalog

import (
	"strconv"
	"strings"
	"time"
)

// MaxReplicas bounds caddy.max_replicas and caddy.min_replicas: a tenant's
// label cannot have Caddy run more than this many replicas of a service.
const MaxReplicas = 100

// Replicas is what a Swarm service's labels say of its growth under load
// (R5j): Caddy adds a replica while every routable task of a route is
// past SoftLimit, up to Max, and takes one away once the load has fitted
// in one replica fewer for After, down to Min. Max 0: the service is
// never scaled.
type Replicas struct {
	// Min is caddy.min_replicas, 1 when absent.
	Min int
	// Max is caddy.max_replicas; 0 when absent or bad.
	Max int
	// SoftLimit is caddy.soft_limit, 0 when absent or bad.
	SoftLimit int
	// After is caddy.standby_after, 0 when absent or bad (the scaler's
	// default applies).
	After time.Duration
}

// ParseReplicas reads caddy.max_replicas and caddy.min_replicas (whole
// numbers from 1 to MaxReplicas, the min no more than the max),
// caddy.soft_limit and caddy.standby_after. bad names the label that is
// not valid ("" if none): a bad max_replicas leaves the service unscaled,
// a bad min_replicas counts as 1.
func ParseReplicas(labels map[string]string) (r Replicas, bad string) {
	r.Min = 1
	raw, ok := labels[LabelMaxReplicas]
	if !ok {
		return r, ""
	}
	if n, ok := replicaCount(raw); ok {
		r.Max = n
	} else {
		return r, LabelMaxReplicas
	}
	if raw, ok := labels[LabelMinReplicas]; ok {
		if n, ok := replicaCount(raw); ok && n <= r.Max {
			r.Min = n
		} else {
			bad = LabelMinReplicas
		}
	}
	pool, _ := parsePool(labels)
	r.SoftLimit = int(pool.softLimit)
	std, _ := parseStandby(labels)
	r.After = std.After
	return r, bad
}

// replicaCount parses a whole number from 1 to MaxReplicas.
func replicaCount(raw string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	return n, err == nil && n >= 1 && n <= MaxReplicas
}
