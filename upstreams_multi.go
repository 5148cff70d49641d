package caddydicer

import (
	"slices"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// Several daemons behind one route: Caddy's own `dynamic multi { dicer
// {...} docker {...} }` asks each of its sources in turn and appends their
// upstreams. Each of our sources answers from its own daemon's catalog, so
// alone it would return its scale-to-zero fallback (R5) while another
// source has routable instances, and two sources would each wake one
// instance; and an exact `caddy.host` claim on one daemon would not keep
// another daemon's wildcard claimants out (R2a). So the sources of this
// plugin that one `dynamic multi` holds form a group, and each answers as
// a member of it:
//
//   - R2a across daemons: a host that a candidate of any member (an
//     instance of its daemon, one its selector matches if it has one)
//     lists by name is served by no member's wildcard claimant;
//   - R5 across daemons: a member returns its fallback only when no member
//     has a routable instance for the request, and only the first member
//     (in the order of the multi's block) with the best fallback returns
//     it, an instance already on its way up (R5.1) before one on standby;
//     so one instance is woken at a time for the whole route.
//
// Sources of other modules in the same multi (`a`, `srv`, ...) are not
// members: their upstreams are appended as Caddy does.

// sourceGroup is the members of one multi, in the multi's order (Caddy
// provisions them in that order). The config load's dicer app (package
// dicerapp) holds it, so it lives as long as the config that holds its
// multi. Membership changes only while the config is provisioned or
// cleaned up; requests read it with one atomic load.
type sourceGroup struct {
	members atomic.Pointer[[]*upstreamSource]
}

// multiParent returns the `dynamic multi` source that is provisioning the
// module ctx provisions, if it is one (Caddy's ctx.Modules ends with the
// module and, before it, the module that loads it).
func multiParent(ctx caddy.Context) (*reverseproxy.MultiUpstreams, bool) {
	mods := ctx.Modules()
	if len(mods) < 2 {
		return nil, false
	}
	parent, ok := mods[len(mods)-2].(*reverseproxy.MultiUpstreams)
	return parent, ok
}

// multiGroup returns the group of the sources multi holds in ctx's config
// load (the dicer app keeps it), made at the first call.
func multiGroup(ctx caddy.Context, multi *reverseproxy.MultiUpstreams) (*sourceGroup, error) {
	app, err := dicerapp.Of(ctx)
	if err != nil {
		return nil, err
	}
	return app.Shared(multi, func() any { return new(sourceGroup) }).(*sourceGroup), nil
}

// joinGroup makes s a member of the group of the multi that holds it, if
// one does.
func (s *upstreamSource) joinGroup(ctx caddy.Context) error {
	parent, ok := multiParent(ctx)
	if !ok {
		return nil
	}
	g, err := multiGroup(ctx, parent)
	if err != nil {
		return err
	}
	for {
		old := g.members.Load()
		var members []*upstreamSource
		if old != nil {
			members = slices.Clone(*old)
		}
		members = append(members, s)
		if g.members.CompareAndSwap(old, &members) {
			break
		}
	}
	s.group, s.inGroup = g, true
	return nil
}

// leaveGroup undoes joinGroup. It leaves s.group set: a request of the
// unloading config may still be answered by s, against the members left.
func (s *upstreamSource) leaveGroup() {
	if !s.inGroup {
		return
	}
	for {
		old := s.group.members.Load()
		members := slices.DeleteFunc(slices.Clone(*old), func(m *upstreamSource) bool { return m == s })
		if s.group.members.CompareAndSwap(old, &members) {
			break
		}
	}
	s.inGroup = false
}

// targets appends to dst where a request for host goes through s as a
// member of g (see above): its own instances, read from snap, with R2a and
// R5 holding across the members, and what kind of pick they are
// (catalog.PickedNone when deferred); deferred says that another member's
// instances serve or that its fallback is the one to wake, so that s
// wakes none of its daemon's, Docker's included. The members' catalogs are read only for a
// host that no candidate of s lists by name (R2a) and when s has no
// routable instance (R5): a lookup each, no allocation.
//
// With a request path (R2d), the prefix served is the longest that an
// instance of any member claims: a lookup per segment in each member's
// catalog.
func (g *sourceGroup) targets(s *upstreamSource, snap *catalog.Snapshot, dst []catalog.Target, host, path string) (_ []catalog.Target, _ catalog.Pick, deferred bool) {
	members := *g.members.Load()
	listedHere := snap.ClaimsExactly(s.route, host)
	listedElsewhere := false
	if !listedHere {
		for _, m := range members {
			if m != s && m.conn.Catalog().Snapshot().ClaimsExactly(m.route, host) {
				listedElsewhere = true
				break
			}
		}
	}
	route, prefix := s.route, ""
	if path != "" {
		route.Path = path
		prefix = snap.PathPrefix(route, host, listedElsewhere)
		for _, m := range members {
			if m != s {
				if p := m.conn.Catalog().Snapshot().PathPrefix(m.routeAt(path, false), host, listedHere || listedElsewhere); len(p) > len(prefix) {
					prefix = p
				}
			}
		}
		route.Path, route.PathExact = prefix, true
	}
	n := len(dst)
	dst, pick := snap.Pick(dst, route, host, listedElsewhere)
	if pick == catalog.PickedNone || pick == catalog.PickedRoutable {
		return dst, pick, false
	}
	before := true // whether m comes before s in the multi
	for _, m := range members {
		if m == s {
			before = false
			continue
		}
		switch other := m.conn.Catalog().Snapshot().PickOf(m.routeAt(prefix, prefix != ""), host, listedHere || listedElsewhere); {
		case other == catalog.PickedRoutable,
			other == catalog.PickedWoken && (pick == catalog.PickedStandby || before),
			other == catalog.PickedStandby && pick == catalog.PickedStandby && before:
			return dst[:n], catalog.PickedNone, true // m's instances serve, or m's fallback is the one woken
		}
	}
	return dst, pick, false
}
