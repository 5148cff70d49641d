package connection

import (
	"slices"
	"strings"
	"sync"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Route is an upstream source on a connection, as the connection and the
// admin API see it.
type Route interface {
	// CloseIdle closes the idle connections of the route's transport, so
	// that none from before an instance's freeze is reused (R5a).
	CloseIdle()
	// CatalogRoute is the route in the catalog, and Selects its selector
	// as configured ("" for none).
	CatalogRoute() catalog.Route
	Selects() string
	// Targets are where a request for host and path ("" for any) goes
	// in snap, in rotation order; deferred says another source of the
	// route's dynamic multi serves it instead (R5b).
	Targets(snap *catalog.Snapshot, host, path string) (targets []catalog.Target, deferred bool)
}

// Permission is an on-demand TLS permission on a connection.
type Permission interface {
	// Decide is nil if the permission allows a certificate for host, or
	// the reason it refuses.
	Decide(host string) error
}

// NamedRoute is a route on the connection and its name.
type NamedRoute struct {
	Name  string
	Route Route
}

// AddRoute puts route on the connection under name, for the admin API and
// idle closing; RemoveRoute takes it off.
func (c *Conn) AddRoute(route Route, name string) { c.routes.add(route, name) }

// RemoveRoute takes route off the connection.
func (c *Conn) RemoveRoute(route Route) { c.routes.remove(route) }

// Routes are the routes on the connection by name, one per name: during a
// reload, the old config's routes and the new one's overlap.
func (c *Conn) Routes() []NamedRoute { return c.routes.list() }

// AddPermission puts p on the connection, for the admin API.
func (c *Conn) AddPermission(p Permission) { c.permissions.add(p, struct{}{}) }

// RemovePermission takes p off the connection.
func (c *Conn) RemovePermission(p Permission) { c.permissions.remove(p) }

// Permissions are the permissions on the connection.
func (c *Conn) Permissions() []Permission { return c.permissions.list() }

// members is a set of values of the connection (its routes with their
// names, its permissions), safe for concurrent use.
type members[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (s *members[K, V]) add(k K, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[K]V)
	}
	s.m[k] = v
}

func (s *members[K, V]) remove(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// each calls f for each member, outside the lock, on a copy.
func (s *members[K, V]) each(f func(K, V)) {
	s.mu.Lock()
	keys, vals := make([]K, 0, len(s.m)), make([]V, 0, len(s.m))
	for k, v := range s.m {
		keys, vals = append(keys, k), append(vals, v)
	}
	s.mu.Unlock()
	for i := range keys {
		f(keys[i], vals[i])
	}
}

// routeSet holds the routes on a connection, with their names.
type routeSet struct{ members[Route, string] }

// list returns the routes by name, one per name: during a reload, the old
// config's routes and the new one's overlap.
func (r *routeSet) list() []NamedRoute {
	var out []NamedRoute
	r.each(func(s Route, name string) {
		if !slices.ContainsFunc(out, func(n NamedRoute) bool { return n.Name == name }) {
			out = append(out, NamedRoute{name, s})
		}
	})
	slices.SortFunc(out, func(a, b NamedRoute) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// closeIdle closes the idle connections of the transports of every route
// on the connection (R5a): an instance was seen frozen.
func (r *routeSet) closeIdle() { r.each(func(s Route, _ string) { s.CloseIdle() }) }

// permissionSet holds the permissions on a connection.
type permissionSet struct{ members[Permission, struct{}] }

func (p *permissionSet) list() []Permission {
	out := []Permission{}
	p.each(func(h Permission, _ struct{}) { out = append(out, h) })
	return out
}
