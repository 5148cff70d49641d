package catalog

import (
	"strconv"
	"strings"
)

// Queue at capacity (R5q): the catalog parses the caddy.max_requests label
// and hands it to the request path with each target; the upstream source's
// queue (internal/queue) decides.

const (
	// LabelMaxRequests is how many requests an instance takes in flight
	// at once (R5q): a request that finds every routable instance of its
	// route at its limit waits in the route's queue.
	LabelMaxRequests = "caddy.max_requests"
	// MaxMaxRequests bounds caddy.max_requests (and the route's
	// max_requests setting).
	MaxMaxRequests = 100_000
)

// parseMaxRequests reads caddy.max_requests, a whole number from 1 to
// MaxMaxRequests: 0 when absent, bad set when present and not valid.
func parseMaxRequests(labels map[string]string) (n int32, bad bool) {
	raw, ok := labels[LabelMaxRequests]
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || v < 1 || v > MaxMaxRequests {
		return 0, true
	}
	return int32(v), false
}

// Capacity is how many requests targets, a route's routable instances,
// take in flight at once (R5q): the sum of their caddy.max_requests, with
// fallback for those without it; 0, no limit, when one has neither (or
// there is no target).
func Capacity(targets []Target, fallback int) int {
	total := 0
	for _, t := range targets {
		n := int(t.MaxRequests)
		if n == 0 {
			n = fallback
		}
		if n <= 0 {
			return 0
		}
		total += n
	}
	return total
}

// MarkQueued notes on targets that their route has requests waiting for
// a slot (R5q): a pool of them grows then (Loaded, R5j).
func MarkQueued(targets []Target) {
	for i := range targets {
		targets[i].Queued = true
	}
}
