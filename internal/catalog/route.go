package catalog

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
}

// Target is one place a request may go.
type Target struct {
	// Instance is the instance's name.
	Instance string
	// Dial is host:port, never localhost (R4).
	Dial string
}

// Targets appends to dst where a request for host (normalized with
// NormalizeHost) may go on route, in instance-name order: every routable
// instance (R1-R4), else at most one instance to wake (R5), else nothing.
func (s *Snapshot) Targets(dst []Target, route Route, host string) []Target {
	var candidates []*entry
	if route.View != nil {
		candidates = s.views[route.View]
	} else {
		candidates, _ = s.hosts.Get(host)
	}
	n := len(dst)
	for _, e := range candidates {
		if !e.routable(route.Network) || !e.servesHost(host) {
			continue
		}
		if ep := e.resolve(route, s.reach); ep.dial != "" {
			dst = append(dst, Target{Instance: e.inst.Name, Dial: ep.dial})
		}
	}
	if len(dst) > n {
		return dst
	}
	if e, ep := s.fallback(candidates, route, host); e != nil {
		dst = append(dst, Target{Instance: e.inst.Name, Dial: ep.dial})
	}
	return dst
}

// fallback picks the one instance to wake when none is routable (R5): one
// that runs but awaits its first health verdict (just woken), else the first
// on standby whose requests go to a published port, the connection to which
// makes the daemon wake it.
func (s *Snapshot) fallback(candidates []*entry, route Route, host string) (*entry, endpoint) {
	for _, e := range candidates {
		if e.awaitingVerdict() && e.servesHost(host) {
			if ep := e.resolve(route, s.reach); ep.dial != "" {
				return e, ep
			}
		}
	}
	for _, e := range candidates {
		if e.inst.WakeOnConnect && e.inst.State == StateStandby && e.servesHost(host) {
			if ep := e.resolve(route, s.reach); ep.published {
				return e, ep
			}
		}
	}
	return nil, endpoint{}
}

// Claimed reports whether some instance, in any state, lists host (from
// NormalizeHost) in its caddy.host label (R7).
func (s *Snapshot) Claimed(host string) bool {
	_, ok := s.hosts.Get(host)
	return ok
}

// Hosts is the number of distinct hosts claimed; for tests and logs.
func (s *Snapshot) Hosts() int { return s.hosts.Len() }
