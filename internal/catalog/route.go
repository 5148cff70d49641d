package catalog

import (
	"slices"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Route is what one reverse_proxy route asks of the catalog.
type Route struct {
	// View holds the instances the route's selector matches; nil routes by
	// the caddy.host label alone (R2).
	View *View
	// Port is the route's port setting, 0 when unset (R3).
	Port int
	// Network is the route's network setting: the network to reach
	// instances on when they are on several (R11); "" when unset.
	Network string
	// Path is the request's decoded path (URL.Path; "" is "/"), set per
	// request on a copy of the route (R2d): of the instances serving the
	// host, only those claiming the longest prefix of it that one of them
	// claims in caddy.path serve it, and those without caddy.path (or
	// listing `/`) when none claims one. It is put in RequestPath's form
	// only for a host whose candidates have a caddy.path label.
	Path string
	// PathExact makes Path the prefix served, as it is: a `dynamic multi`
	// sets it to the longest prefix over all its daemons (PathPrefix).
	PathExact bool
}

// Target is one place a request may go.
type Target struct {
	// Instance is the instance's name.
	Instance string
	// Dial is host:port, never localhost (R4).
	Dial string
	// Activity is set for an instance labelled caddy.standby_after or
	// caddy.soft_limit (R5j): the request path records its use there.
	Activity *Activity
	// Weight is the instance's share of the rotation under our selection
	// policies (R4c): its runtime weight, else its caddy.weight, else 1.
	Weight int
	// Identity is what sticky sessions key on (R4d): caddy.session_key,
	// else the daemon's identity of the instance, else its name.
	Identity string
	// SoftLimit is its caddy.soft_limit (R5j), 0 when none.
	SoftLimit int32
	// MaxRequests is its caddy.max_requests (R5q, maxrequests.go), 0 when
	// none.
	MaxRequests int32
	// Queued is set by the request path when the route has requests
	// waiting for a slot (R5q, MarkQueued).
	Queued bool
	// Ignore is its caddy.standby_ignore (R5r, activity.go): the requests
	// the request path does not count as its activity, nor, on standby,
	// wake it for; nil when none.
	Ignore *Ignore
}

// Targets appends to dst where a request for host (normalized with
// NormalizeHost) may go on route, in instance-name order: every routable
// instance (R1-R4), else at most one instance to wake (R5), else nothing.
func (s *Snapshot) Targets(dst []Target, route Route, host string) []Target {
	dst, _ = s.Pick(dst, route, host, false)
	return dst
}

// Pick says what kind of targets a route picks for a request: the
// routable instances, else the one to wake (R5, in order of preference),
// else nothing.
type Pick uint8

const (
	// PickedNone: no target.
	PickedNone Pick = iota
	// PickedRoutable: the routable instances.
	PickedRoutable
	// PickedWoken: the instance to wake is one already on its way up
	// (R5, first choice).
	PickedWoken
	// PickedStandby: the instance to wake is on standby (R5, second
	// choice).
	PickedStandby
)

// Pick is Targets for a route that is one of several serving the same
// requests (the sources of one `dynamic multi`), each over its own daemon's
// catalog: it also says what it picked, so that R5 can hold across them,
// and claimedElsewhere says that a candidate of another of those routes
// lists host exactly (ClaimsExactly), which takes host from this route's
// wildcard claimants too (R2a).
func (s *Snapshot) Pick(dst []Target, route Route, host string, claimedElsewhere bool) ([]Target, Pick) {
	candidates, exact := s.candidates(route, host, claimedElsewhere)
	n := len(dst)
	for _, e := range candidates {
		if !e.routable(route.Network) || !e.servesHost(host, exact) {
			continue
		}
		if ep := e.resolve(route, s.reach); ep.dial != "" {
			dst = append(dst, Target{Instance: e.inst.Name, Dial: ep.dial, Activity: e.activity,
				Weight: e.effectiveWeight(), Identity: e.identity, SoftLimit: e.pool.softLimit, MaxRequests: e.pool.maxRequests, Ignore: e.ignore})
		}
	}
	if len(dst) > n {
		return dst, PickedRoutable
	}
	e, pick := s.fallback(candidates, route, host, exact)
	if e != nil {
		dst = append(dst, Target{Instance: e.inst.Name, Dial: e.resolve(route, s.reach).dial,
			Weight: e.effectiveWeight(), Identity: e.identity, Ignore: e.ignore})
	}
	return dst, pick
}

// PickOf is what Pick would pick, without the targets: no allocation, and
// no more work than up to the first routable instance.
func (s *Snapshot) PickOf(route Route, host string, claimedElsewhere bool) Pick {
	candidates, exact := s.candidates(route, host, claimedElsewhere)
	for _, e := range candidates {
		if !e.routable(route.Network) || !e.servesHost(host, exact) {
			continue
		}
		if h, _, _ := e.place(route, s.reach); h != "" {
			return PickedRoutable
		}
	}
	_, pick := s.fallback(candidates, route, host, exact)
	return pick
}

// ListsExactly reports whether an instance, in any state, lists host in
// its caddy.host label by name (not through a wildcard).
func (s *Snapshot) ListsExactly(host string) bool {
	_, ok := s.hosts.Get(host)
	return ok
}

// ClaimsExactly reports whether one of route's candidates, in any state,
// lists host in its caddy.host label by name (not through a wildcard),
// which takes host from the route's wildcard claimants (R2a): on a route
// without a selector, any instance (ListsExactly); on a selector route,
// only one that its selector matches, since an outsider gets none of the
// route's requests. An index lookup and, on a selector route, a binary
// search of its match list per instance listing host; no allocation.
func (s *Snapshot) ClaimsExactly(route Route, host string) bool {
	listing, ok := s.hosts.Get(host)
	if !ok || route.View == nil {
		return ok
	}
	return anyIn(listing, s.views[route.View])
}

// anyIn reports whether one of list is in sorted, a list sorted by name.
func anyIn(list, sorted []*entry) bool {
	for _, e := range list {
		if i, ok := slices.BinarySearchFunc(sorted, e, byName); ok && sorted[i] == e {
			return true
		}
	}
	return false
}

// candidates is the instances that may serve host on route (R2), and
// whether one of them, or (claimedElsewhere) one of another route's
// serving the same requests, lists host exactly, which keeps the wildcard
// claimants out (R2a): an instance outside a selector route's selector
// takes no host from its wildcard claimants.
//
// Of those, when one has a caddy.path label, only the claimants of the
// longest prefix of route.Path that one of them claims (R2d), or of the
// root: a lookup per segment of the path in a trie built when the
// snapshot was published.
func (s *Snapshot) candidates(route Route, host string, claimedElsewhere bool) ([]*entry, bool) {
	list, exact, listed := s.claimants(route, host, claimedElsewhere)
	if paths := s.pathsOf(route, host, listed); paths != nil {
		list = paths.serving(route, host, exact, listed).claimants
	}
	return list, exact
}

// claimants is candidates before the path step (R2d), and whether the
// list is the host's exact listing (not a view's, nor a wildcard's).
func (s *Snapshot) claimants(route Route, host string, claimedElsewhere bool) (_ []*entry, exact, listed bool) {
	if route.View != nil {
		// exact matters only to wildcard claimants: without any, the
		// request skips the lookup. Their path tries (wildPaths) are
		// built from the wildcard index, under its keys only, so an empty
		// index says there are none by path either.
		exact = claimedElsewhere || s.wildcards.Len() > 0 && s.ClaimsExactly(route, host)
		return s.views[route.View], exact, false
	}
	if listing, ok := s.hosts.Get(host); ok || claimedElsewhere {
		return listing, true, true
	}
	return s.byWildcard(host), false, false // R2a: only a host nobody lists exactly
}

// fallback picks the one instance to wake when none is routable (R5): one
// that runs but awaits its first health verdict (just woken), else the first
// on standby whose requests go to a published port, the connection to which
// makes the daemon wake it. An instance that Caddy itself wakes (Docker,
// caddy.standby_after) counts the same, on its way up or on standby, but
// has no place to send the request to yet: its pick comes with a nil
// entry, and the request waits for it (see WakeCandidates).
func (s *Snapshot) fallback(candidates []*entry, route Route, host string, exact bool) (*entry, Pick) {
	for _, e := range candidates {
		if e.maint || !e.servesHost(host, exact) { // R5i
			continue
		}
		if e.wakingUp() {
			return nil, PickedWoken
		}
		if e.awaitingVerdict() {
			if h, _, _ := e.place(route, s.reach); h != "" {
				return e, PickedWoken
			}
		}
	}
	for _, e := range candidates {
		if e.maint || !e.servesHost(host, exact) { // R5i
			continue
		}
		if e.sleeping() {
			return nil, PickedStandby
		}
		if e.inst.WakeOnConnect && e.inst.State == StateStandby {
			if _, _, published := e.place(route, s.reach); published {
				return e, PickedStandby
			}
		}
	}
	return nil, PickedNone
}

// byWildcard is the instances whose caddy.host has a wildcard pattern
// matching host (R2a): one index lookup, whatever the number of instances.
func (s *Snapshot) byWildcard(host string) []*entry {
	suffix, ok := WildcardSuffix(host)
	if !ok {
		return nil
	}
	list, _ := s.wildcards.Get(suffix)
	return list
}

// Claim says how a host is claimed (R7, R2a).
type Claim uint8

const (
	// Unclaimed: no instance (that counts) lists the host.
	Unclaimed Claim = iota
	// ClaimedExactly: an instance lists the host by name.
	ClaimedExactly
	// ClaimedByWildcard: no instance lists the host by name, and one has a
	// wildcard pattern that matches it.
	ClaimedByWildcard
)

// Claimed reports whether some instance, in any state, claims host (from
// NormalizeHost) in its caddy.host label, exactly or through a wildcard
// (R7).
func (s *Snapshot) Claimed(host string) bool { return s.ClaimOf(host, nil) != Unclaimed }

// ClaimOf says how host (from NormalizeHost) is claimed by the instances,
// in any state, that R2a gives it to: those listing it exactly if any,
// else those with a matching wildcard. With sel, only those of them that
// sel matches count: an instance outside sel neither claims a host nor
// lets a wildcard inside sel claim it. It costs index lookups and, with
// sel, a selector match per claimant; no allocation.
func (s *Snapshot) ClaimOf(host string, sel *selector.Selector) Claim {
	if list, ok := s.hosts.Get(host); ok {
		if anyMatches(list, sel) {
			return ClaimedExactly
		}
		return Unclaimed
	}
	if anyMatches(s.byWildcard(host), sel) {
		return ClaimedByWildcard
	}
	return Unclaimed
}

// anyMatches reports whether sel (nil: any) matches one of list.
func anyMatches(list []*entry, sel *selector.Selector) bool {
	if sel == nil {
		return len(list) > 0
	}
	for _, e := range list {
		if sel.Matches(e.inst.Labels) {
			return true
		}
	}
	return false
}

// Hosts is the number of distinct hosts claimed exactly; for tests and
// logs.
func (s *Snapshot) Hosts() int { return s.hosts.Len() }

// Wildcards is the number of distinct wildcard suffixes claimed; for tests
// and logs.
func (s *Snapshot) Wildcards() int { return s.wildcards.Len() }
