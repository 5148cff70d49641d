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
func (c *Conn) AddPermission(p Permission) { c.permissions.add(p) }

// RemovePermission takes p off the connection.
func (c *Conn) RemovePermission(p Permission) { c.permissions.remove(p) }

// Permissions are the permissions on the connection.
func (c *Conn) Permissions() []Permission { return c.permissions.list() }

// routeSet holds the routes on a connection, with their names.
type routeSet struct {
	mu     sync.Mutex
	routes map[Route]string
}

func (r *routeSet) add(s Route, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = make(map[Route]string)
	}
	r.routes[s] = name
}

func (r *routeSet) remove(s Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.routes, s)
}

func (r *routeSet) list() []NamedRoute {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []NamedRoute
	for s, name := range r.routes {
		if !slices.ContainsFunc(out, func(n NamedRoute) bool { return n.Name == name }) {
			out = append(out, NamedRoute{name, s})
		}
	}
	slices.SortFunc(out, func(a, b NamedRoute) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// closeIdle closes the idle connections of the transports of every route
// on the connection (R5a): an instance was seen frozen.
func (r *routeSet) closeIdle() {
	r.mu.Lock()
	routes := make([]Route, 0, len(r.routes))
	for s := range r.routes {
		routes = append(routes, s)
	}
	r.mu.Unlock()
	for _, s := range routes {
		s.CloseIdle()
	}
}

// permissionSet holds the permissions on a connection.
type permissionSet struct {
	mu    sync.Mutex
	perms map[Permission]bool
}

func (p *permissionSet) add(h Permission) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perms == nil {
		p.perms = make(map[Permission]bool)
	}
	p.perms[h] = true
}

func (p *permissionSet) remove(h Permission) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.perms, h)
}

func (p *permissionSet) list() []Permission {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Permission, 0, len(p.perms))
	for h := range p.perms {
		out = append(out, h)
	}
	return out
}
