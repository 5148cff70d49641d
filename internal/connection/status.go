package connection

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// What a connection tells about itself, for the admin API and metrics.

// Connection states, as the admin API reports them (Status.State).
const (
	// StateConnecting: the daemon has not been listed yet.
	StateConnecting = "connecting"
	// StateFollowing: listed, and its events are followed.
	StateFollowing = "following"
	// StateReconnecting: a session that had listed ended; the last known
	// instances are still routed to (R6).
	StateReconnecting = "reconnecting"
)

// followStatus is what the follow loop last said of a connection.
type followStatus struct {
	mu sync.Mutex
	s  Status
}

// Status is what the follow loop last said of a connection, at one
// moment.
type Status struct {
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
	return &followStatus{s: Status{State: StateConnecting, Since: time.Now()}}
}

func (f *followStatus) snapshot() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *followStatus) update(change func(*Status)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.s)
}

// setState moves to state, keeping Since if it is the state already.
func (s *Status) setState(state string, now time.Time) {
	if s.State != state {
		s.State, s.Since = state, now
	}
}

// trace is what the connection hears from its follow loop: it keeps the
// status and counts.
func (c *Conn) trace() *follow.Trace {
	return &follow.Trace{
		Listed: func(_ int, relisted bool, cause string) {
			c.status.update(func(s *Status) {
				s.setState(StateFollowing, time.Now())
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
			c.status.update(func(s *Status) {
				if s.State != StateConnecting || listed {
					s.setState(StateReconnecting, now)
				}
				s.LastError, s.LastErrorAt = e.Reason, now
			})
		},
		EventReceived: func() {
			c.metrics.eventsReceived.Inc()
			now := time.Now()
			c.status.update(func(s *Status) { s.LastEvent = now })
		},
		EventApplied: c.metrics.applied,
		Version:      c.heardVersion,
	}
}

// heardVersion keeps what the daemon said of itself (R9a) and warns, once
// per connection and version, of what will not work with it.
func (c *Conn) heardVersion(v daemonver.Version) {
	warnings := daemonver.Warnings(c.kind, v)
	var changed bool
	c.status.update(func(s *Status) {
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

// Status is what the follow loop last said of the connection.
func (c *Conn) Status() Status { return c.status.snapshot() }
