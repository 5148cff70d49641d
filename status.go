package caddydicer

import (
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// What a connection tells about itself, for the admin API and metrics.

// Connection states, as the admin API reports them.
const (
	// stateConnecting: the daemon has not been listed yet.
	stateConnecting = "connecting"
	// stateFollowing: listed, and its events are followed.
	stateFollowing = "following"
	// stateReconnecting: a session that had listed ended; the last known
	// instances are still routed to (R6).
	stateReconnecting = "reconnecting"
)

// followStatus is what the follow loop last said of a connection.
type followStatus struct {
	mu sync.Mutex
	s  followState
}

// followState is a copy of a followStatus at one moment.
type followState struct {
	State string
	// Since is when State began.
	Since time.Time
	// LastError is the reason the last session ended ("" if none did),
	// as the adapter words it (never a token), and LastErrorAt when.
	LastError   string
	LastErrorAt time.Time
	// Relists counts the listings after the first, and RelistCause says
	// why the session before the last one ended (follow.RelistCause).
	Relists     int
	RelistCause string
	// LastEvent is when the last event arrived (zero: none yet).
	LastEvent time.Time
	// Version is what the daemon last said of itself (R9a), and
	// VersionWarnings what will not work with it.
	Version         daemonver.Version
	VersionWarnings []string
}

func newFollowStatus() *followStatus {
	return &followStatus{s: followState{State: stateConnecting, Since: time.Now()}}
}

func (f *followStatus) snapshot() followState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *followStatus) update(change func(*followState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.s)
}

// setState moves to state, keeping Since if it is the state already.
func (s *followState) setState(state string, now time.Time) {
	if s.State != state {
		s.State, s.Since = state, now
	}
}

// trace is what the connection hears from its follow loop: it keeps the
// status and counts.
func (c *connection) trace() *follow.Trace {
	return &follow.Trace{
		Listed: func(_ int, relisted bool, cause string) {
			c.status.update(func(s *followState) {
				s.setState(stateFollowing, time.Now())
				if relisted {
					s.Relists++
					s.RelistCause = cause
				}
			})
			if relisted {
				c.metrics.relisted(cause)
			}
		},
		Ended: func(e follow.End, listed bool, _ time.Duration) {
			now := time.Now()
			c.status.update(func(s *followState) {
				if s.State != stateConnecting || listed {
					s.setState(stateReconnecting, now)
				}
				s.LastError, s.LastErrorAt = e.Reason, now
			})
		},
		EventReceived: func() {
			c.metrics.eventsReceived.Inc()
			now := time.Now()
			c.status.update(func(s *followState) { s.LastEvent = now })
		},
		EventApplied: c.metrics.applied,
		Version:      c.heardVersion,
	}
}

// heardVersion keeps what the daemon said of itself (R9a) and warns, once
// per connection and version, of what will not work with it.
func (c *connection) heardVersion(v daemonver.Version) {
	warnings := daemonver.Warnings(c.kind, v)
	var changed bool
	c.status.update(func(s *followState) {
		changed = s.Version != v
		s.Version, s.VersionWarnings = v, warnings
	})
	if !changed || c.logger == nil {
		return
	}
	for _, w := range warnings {
		c.logger.Warn("the daemon's version: "+w, zap.String("kind", c.kind), zap.String("address", c.address),
			zap.Stringer("version", v))
	}
}

// routeSet holds the upstream sources on a connection, with their names.
type routeSet struct {
	mu     sync.Mutex
	routes map[*upstreamSource]string
}

func (r *routeSet) add(s *upstreamSource, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = make(map[*upstreamSource]string)
	}
	r.routes[s] = name
}

func (r *routeSet) remove(s *upstreamSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.routes, s)
}

// namedRoute is an upstream source and its name.
type namedRoute struct {
	name   string
	source *upstreamSource
}

// list returns the routes by name, one per name: during a reload, the old
// config's routes and the new one's overlap.
func (r *routeSet) list() []namedRoute {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []namedRoute
	for s, name := range r.routes {
		if !slices.ContainsFunc(out, func(n namedRoute) bool { return n.name == name }) {
			out = append(out, namedRoute{name, s})
		}
	}
	slices.SortFunc(out, func(a, b namedRoute) int { return strings.Compare(a.name, b.name) })
	return out
}

// openConnections returns the open daemon connections, by kind and
// address.
func openConnections() []*connection {
	var out []*connection
	connections.Range(func(_, v any) bool {
		if c, ok := v.(*connection); ok && c != nil {
			out = append(out, c)
		}
		return true
	})
	slices.SortFunc(out, func(a, b *connection) int {
		if d := strings.Compare(a.kind, b.kind); d != 0 {
			return d
		}
		return strings.Compare(a.address, b.address)
	})
	return out
}

// permissionSet holds the permissions on a connection.
type permissionSet struct {
	mu    sync.Mutex
	perms map[*hostPermission]bool
}

func (p *permissionSet) add(h *hostPermission) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perms == nil {
		p.perms = make(map[*hostPermission]bool)
	}
	p.perms[h] = true
}

func (p *permissionSet) remove(h *hostPermission) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.perms, h)
}

func (p *permissionSet) list() []*hostPermission {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*hostPermission, 0, len(p.perms))
	for h := range p.perms {
		out = append(out, h)
	}
	return out
}
