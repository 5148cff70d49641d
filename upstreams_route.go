package caddydicer

import (
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// What the connection and the admin API see of an upstream source: a
// connection.Route.

// CatalogRoute is the source's route in the catalog.
func (s *upstreamSource) CatalogRoute() catalog.Route { return s.route }

// Selects is the source's selector as configured ("" for none).
func (s *upstreamSource) Selects() string { return s.Selector }

// Targets are where a request for host and path ("" for any) goes in snap,
// as GetUpstreams picks them, without waking or recording anything;
// deferred says another source of its dynamic multi serves it (R5b).
func (s *upstreamSource) Targets(snap *catalog.Snapshot, host, path string) (targets []catalog.Target, deferred bool) {
	if s.group != nil {
		targets, _, deferred = s.group.targets(s, snap, nil, host, path)
		return targets, deferred
	}
	route := s.route
	if path != "" {
		route.Path = path
	}
	return snap.Targets(nil, route, host), false
}

// Interface guards
var (
	_ connection.Route      = (*upstreamSource)(nil)
	_ connection.Permission = (*hostPermission)(nil)
)
