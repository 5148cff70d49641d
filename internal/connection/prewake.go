package connection

import (
	"sync"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// PreWake starts, for a TLS ClientHello that names host (from
// catalog.NormalizeHost), the wake a request for host would start on one
// of the connection's routes (R5n, standby.Waker.PreWake): on a route
// that has a routable instance for host it does nothing, nor on a daemon
// Caddy does not wake instances of (Dicer, Swarm). A route without a
// selector wakes by the caddy.host label, as its requests do. A route
// with a selector would route any host to its instances, so it pre-wakes
// only an instance whose caddy.host label lists host, or for a host it
// held a request of before (Hold learns it, up to maxLearnedHosts per
// connection): never for a name a client makes up.
func (c *Conn) PreWake(host string) standby.PreWakeResult {
	if c.scale.mode != scaleStandby || host == "" {
		return standby.PreWakeNothing
	}
	result := standby.PreWakeNothing
	snap := c.catalog.Snapshot()
	c.routes.each(func(r Route, _ string) {
		if result == standby.PreWakeStarted || result == standby.PreWakeUnderWay {
			return
		}
		if targets, deferred := r.Targets(snap, host, ""); len(targets) > 0 || deferred {
			return // served: nothing to wake, nor any idle clock to touch
		}
		route := r.CatalogRoute()
		var claimed func(catalog.WakeCandidate) bool
		if route.View != nil && !c.learned.has(route, host) {
			claimed = listsHost
		}
		if got := c.scale.standby.PreWake(snap, route, host, claimed); got > result {
			result = got
		}
	})
	return result
}

// listsHost keeps a wake candidate with a caddy.host label: one that
// WakeCandidates returned for a host serves it by that label.
func listsHost(cand catalog.WakeCandidate) bool { return cand.Labels[catalog.LabelHost] != "" }

// maxHostName is the longest DNS name (RFC 1035): a longer host is
// nobody's.
const maxHostName = 253

// maxLearnedHosts bounds the hosts a connection remembers its selector
// routes held requests of (R5n): 4,096 of about 100 bytes each.
const maxLearnedHosts = 4096

// learnedHosts are the hosts requests were held for on a connection's
// selector routes, the oldest forgotten first beyond maxLearnedHosts.
type learnedHosts struct {
	mu    sync.Mutex
	set   map[learnedHost]struct{}
	order []learnedHost
}

type learnedHost struct {
	route catalog.Route // Path and PathExact cleared
	host  string
}

func learnedKey(route catalog.Route, host string) learnedHost {
	route.Path, route.PathExact = "", false
	return learnedHost{route, host}
}

// learn remembers host for route, a selector route.
func (l *learnedHosts) learn(route catalog.Route, host string) {
	if route.View == nil || host == "" || len(host) > maxHostName {
		return
	}
	k := learnedKey(route, host)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.set[k]; ok {
		return
	}
	if l.set == nil {
		l.set = make(map[learnedHost]struct{})
	}
	if len(l.order) >= maxLearnedHosts {
		delete(l.set, l.order[0])
		l.order = append(l.order[:0], l.order[1:]...)
	}
	l.set[k] = struct{}{}
	l.order = append(l.order, k)
}

// has reports whether a request for host was held on route.
func (l *learnedHosts) has(route catalog.Route, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.set[learnedKey(route, host)]
	return ok
}
