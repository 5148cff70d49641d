package catalog

import (
	"slices"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/budget"
)

// Sleepers that were removed (R5o): `docker rm` and `docker system prune`
// delete stopped containers, those on standby included. A host whose
// instance was removed while on standby would otherwise answer like a
// host nobody ever claimed; the catalog remembers such instances, bounded,
// so that the request path can say what happened (503: which instance,
// when, nothing will wake it) and the admin API list them.

// Bounds of the removed sleepers a catalog remembers (R5o, docs/state.md).
const (
	// MaxRemovedSleepers is how many it remembers; past that, the oldest
	// of the tenant holding the most is forgotten first (see tenantOf):
	// one tenant's churn forgets its own records, not another's.
	MaxRemovedSleepers = 256
	// RemovedSleeperAge is how long it remembers one.
	RemovedSleeperAge = 24 * time.Hour
	// asleepFor is how long an instance must have been on standby to count
	// as a sleeper when it is removed: `docker rm -f` of a running
	// container stops it a moment before it removes it.
	asleepFor = 2 * time.Second
	// maxRemovedLabelBytes bounds the labels a record keeps (keys and
	// values): past it, none are kept, and the record is found by its
	// caddy.host hosts alone, not by a selector route. maxRemovedNameBytes
	// bounds its name. A record outlives its container by up to
	// RemovedSleeperAge: this bounds what a tenant's create, standby,
	// remove loop keeps (R15).
	maxRemovedLabelBytes = 16 << 10
	maxRemovedNameBytes  = 256
)

// RemovedSleeper is an instance the daemon removed while it was on
// standby (stopped or paused by scale to zero), until its hosts are
// claimed again or RemovedSleeperAge passes.
type RemovedSleeper struct {
	ID, Name string
	// Hosts are the exact hosts it claimed (caddy.host), if any.
	Hosts []string
	// Labels are its labels, for the selector routes that matched it;
	// none when they were over 16 KiB. Name is cut to 256 bytes.
	Labels map[string]string
	Image  string
	// RemovedAt is when the catalog saw it go.
	RemovedAt time.Time
	// wildcards are the suffixes of its caddy.host wildcards, and
	// restricted whether it had a caddy.host label at all (one over the
	// label's cap serves no host): the hosts it served, beside Hosts.
	wildcards  []string
	restricted bool
	// tenant is the share it counts against (tenantOf).
	tenant string
}

// tenantOf is the share of the record a removed instance counts against
// (R5o): the registered domain of its first caddy.host host (exact, else
// a wildcard's suffix; public-suffix aware, as the issuance budgets count,
// R7d), or, without caddy.host, the first (by canonical selector) of the
// routes' selectors that match its labels. Labels are no boundary between
// tenants who set their own (a tenant may list a host under another's
// domain, or copy another's selector labels), but one who does could
// already claim that host and forget the record; a tenant under its own
// domains and selectors spends only its own share. c.mu is held.
func (c *Catalog) tenantOf(e *entry) string {
	switch {
	case len(e.hosts) > 0:
		return "domain " + budget.RegisteredDomain(e.hosts[0])
	case len(e.wildcards) > 0:
		return "domain " + budget.RegisteredDomain(e.wildcards[0])
	case e.restricted:
		return "domain " // a caddy.host over its caps: serves no host
	}
	best := ""
	for key, v := range c.views {
		if (best == "" || key < best) && v.sel.Matches(e.inst.Labels) {
			best = key
		}
	}
	return "route " + best
}

// forgetOne drops one record from list, which is one over
// MaxRemovedSleepers: the oldest of the tenant holding the most, and of
// those with as many as the newcomer's tenant (the last record), the
// newcomer's own. So another tenant's churn never takes a tenant below
// its fair share (MaxRemovedSleepers over the tenants remembered) nor
// forgets its last record; a tenant alone keeps all.
func forgetOne(list removedSleepers) removedSleepers {
	counts := make(map[string]int, 16)
	for _, r := range list {
		counts[r.tenant]++
	}
	own := list[len(list)-1].tenant
	most, largest := own, counts[own]
	for _, r := range list { // ties: the newcomer's, else the oldest record's
		if counts[r.tenant] > largest {
			most, largest = r.tenant, counts[r.tenant]
		}
	}
	for i, r := range list {
		if r.tenant == most {
			return slices.Delete(list, i, i+1)
		}
	}
	return list
}

// served reports whether r served host on route: a host its caddy.host
// label listed, exactly or through a wildcard; without the label, any
// host of a selector route (not of a route by caddy.host alone).
func (r *RemovedSleeper) served(route Route, host string) bool {
	if !r.restricted {
		return route.View != nil
	}
	if contains(r.Hosts, host) {
		return true
	}
	suffix, ok := WildcardSuffix(host)
	return ok && len(r.wildcards) > 0 && contains(r.wildcards, suffix)
}

// removedSleepers is the catalog's record: a list replaced, never
// changed, under c.mu; read with one atomic load.
type removedSleepers = []RemovedSleeper

// keepAsleep carries over when old went on standby, or notes now if e
// just did.
func (e *entry) keepAsleep(old *entry, now time.Time) {
	switch {
	case !e.onStandby():
	case old != nil && old.onStandby():
		e.asleepSince = old.asleepSince
	default:
		e.asleepSince = now.UnixNano()
	}
}

// asleep reports whether e has been on standby for asleepFor by now.
func (e *entry) asleep(now time.Time) bool {
	return e.onStandby() && e.asleepSince != 0 && now.Sub(time.Unix(0, e.asleepSince)) >= asleepFor
}

// noteRemoved records old, which the daemon no longer has, if it was on
// standby. c.mu is held.
func (c *Catalog) noteRemoved(old *entry, now time.Time) {
	if old == nil || !old.asleep(now) {
		return
	}
	cur := c.liveRemoved(now)
	next := make(removedSleepers, 0, min(len(cur)+1, MaxRemovedSleepers+1))
	for _, r := range cur {
		if r.ID != old.inst.ID {
			next = append(next, r)
		}
	}
	labels, size := old.inst.Labels, 0
	for k, v := range labels {
		size += len(k) + len(v)
	}
	if size > maxRemovedLabelBytes {
		labels = nil
	}
	name := old.inst.Name
	if len(name) > maxRemovedNameBytes {
		name = strings.ToValidUTF8(name[:maxRemovedNameBytes], "")
	}
	next = append(next, RemovedSleeper{ID: old.inst.ID, Name: name, Hosts: slices.Clone(old.hosts),
		Labels: labels, Image: old.inst.Image, RemovedAt: now,
		wildcards: slices.Clone(old.wildcards), restricted: old.restricted, tenant: c.tenantOf(old)})
	if len(next) > MaxRemovedSleepers {
		next = forgetOne(next)
	}
	c.removed.Store(&next)
}

// claimRemoved forgets the removed sleepers whose place e takes: it claims
// one of their hosts, or has their name (a container made again). c.mu is
// held.
func (c *Catalog) claimRemoved(e *entry) {
	p := c.removed.Load()
	if p == nil || len(*p) == 0 {
		return
	}
	var next removedSleepers
	for _, r := range *p {
		claimed := r.Name == e.inst.Name
		for _, h := range r.Hosts {
			claimed = claimed || contains(e.hosts, h)
		}
		for _, w := range r.wildcards {
			claimed = claimed || contains(e.wildcards, w)
		}
		if !claimed {
			next = append(next, r)
		}
	}
	if len(next) != len(*p) {
		c.removed.Store(&next)
	}
}

// liveRemoved is the record without the entries older than
// RemovedSleeperAge by now.
func (c *Catalog) liveRemoved(now time.Time) removedSleepers {
	p := c.removed.Load()
	if p == nil {
		return nil
	}
	out := *p
	for len(out) > 0 && now.Sub(out[0].RemovedAt) > RemovedSleeperAge {
		out = out[1:]
	}
	return out
}

// RemovedSleepers returns the instances removed while on standby that the
// catalog still remembers (R5o), oldest first: at most
// MaxRemovedSleepers, none older than RemovedSleeperAge, none whose host
// was claimed again since.
func (c *Catalog) RemovedSleepers() []RemovedSleeper {
	return slices.Clone(c.liveRemoved(time.Now()))
}

// RemovedSleeper returns the most recent instance removed while on
// standby that served host on route (R5o): one that listed host in its
// caddy.host label (exactly or through a wildcard), or, without the
// label, that the route's selector matched. Another host, which a client
// picks, never shows its name.
// It takes no lock: the request path calls it when it found nothing to
// route to nor to wake.
func (c *Catalog) RemovedSleeper(route Route, host string) (RemovedSleeper, bool) {
	list := c.liveRemoved(time.Now())
	for i := len(list) - 1; i >= 0; i-- {
		r := list[i]
		if route.View != nil && !route.View.sel.Matches(r.Labels) {
			continue
		}
		if !r.served(route, host) {
			continue
		}
		return r, true
	}
	return RemovedSleeper{}, false
}

// Identity is the instance id and the exact hosts it claims, for the
// lifecycle events (R13e) emitted where only its ID is at hand.
func (c *Catalog) Identity(id string) (inst Instance, hosts []string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil {
		return Instance{}, nil, false
	}
	return e.inst, e.hosts, true
}
