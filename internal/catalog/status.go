package catalog

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// What the catalog tells about itself, for metrics and the admin API: read
// only, copied out, never on a request's path.

// InstanceStatus is one instance as the catalog knows it, and its verdict.
type InstanceStatus struct {
	ID   string
	Name string
	// State is the daemon's state word, or standby for a stopped or
	// paused instance Caddy wakes on a request (caddy.standby_after),
	// whose DaemonState then says which.
	State       string
	DaemonState string
	Health      string
	Labels      map[string]string
	// Image is what it runs (Instance.Image), "" unknown: its version for
	// a rollout without caddy.version (R4f).
	Image    string
	Networks []NetworkStatus
	Ports    []PortStatus
	// Routable is set when the instance gets requests (R1-R4) on a route
	// without network or port settings, or, for an instance that names no
	// port of its own, on one of the routes' port settings.
	Routable bool
	// Verdict is "routable", or why the instance gets no requests:
	// `unhealthy`, `caddy.port "abc" is not a port`, `on networks a and b,
	// none chosen`, `no port: publishes none and the route sets none`,
	// `not ready: port 8080 refuses`, `on standby`, ...
	Verdict string
	// Weight is its share of its rotations under the dicer_weighted and
	// dicer_sticky policies (R4c): its runtime weight while one is set
	// (RuntimeWeight), else its caddy.weight label, else 1.
	Weight        int
	RuntimeWeight bool
	// LabelTypos are its label keys that look like misspelt known labels
	// (R13c), each with the closest known one.
	LabelTypos []LabelTypo
	// Paths are the path prefixes the instance serves under its hosts
	// (caddy.path, normalized, R2d); none without the label.
	Paths []string
}

// NetworkStatus is an Attachment, as the admin API shows it.
type NetworkStatus struct {
	Network string
	Address string
	Gateway string
}

// PortStatus is a PublishedPort, as the admin API shows it; HostIP "" is
// every host address.
type PortStatus struct {
	HostIP    string
	HostPort  uint16
	GuestPort uint16
	Protocol  string
}

// Counts are the instances of a catalog by state, and how many are
// routable (as InstanceStatus.Routable).
type Counts struct {
	ByState  map[string]int
	Routable int
}

// Instances returns every instance the catalog holds, in name order, with
// its verdict; with sel (nil: all), only those it matches.
func (c *Catalog) Instances(sel func(labels map[string]string) bool) []InstanceStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]InstanceStatus, 0, len(c.byID))
	for _, e := range c.byID {
		if sel != nil && !sel(e.inst.Labels) {
			continue
		}
		why := c.verdict(e)
		st := InstanceStatus{
			ID: e.inst.ID, Name: e.inst.Name, State: e.inst.State.String(), Health: e.inst.Health.String(),
			Labels: maps.Clone(e.inst.Labels), Image: e.inst.Image,
			Networks:   make([]NetworkStatus, 0, len(e.inst.Networks)),
			Ports:      make([]PortStatus, 0, len(e.inst.Ports)),
			Routable:   why == "",
			Verdict:    why,
			LabelTypos: LabelTypos(e.inst.Labels),

			Weight: e.effectiveWeight(), RuntimeWeight: e.runtime >= 0,
		}
		for _, n := range e.inst.Networks {
			st.Networks = append(st.Networks, NetworkStatus{Network: n.Network, Address: n.Address, Gateway: n.Gateway})
		}
		for _, p := range e.inst.Ports {
			st.Ports = append(st.Ports, PortStatus{HostIP: p.HostIP, HostPort: p.HostPort, GuestPort: p.GuestPort, Protocol: p.Protocol.String()})
		}
		if st.Labels == nil {
			st.Labels = map[string]string{}
		}
		if st.Verdict == "" {
			st.Verdict = "routable"
		}
		if e.onStandby() {
			st.State, st.DaemonState = StateStandby.String(), e.inst.State.String()
			st.Verdict = "on standby (" + st.DaemonState + "): a request wakes it (scale to zero)"
		}
		st.Paths = slices.Clone(e.paths)
		if e.note().badPath != "" && st.Routable {
			st.Routable = false
			st.Verdict = "caddy.path is not valid (R2d): " + e.note().badPath + "; it serves no path"
		}
		if why, refused := e.inst.Labels[LabelRefused]; refused && st.Routable {
			st.Routable = false
			st.Verdict = "not routed (R2f): " + ClipLabel(why)
		}
		if e.inst.Group {
			st.State, st.Routable = groupState, false
			st.Verdict = "stands for its members (a Swarm service's tasks, endpoint tasks), which are routed to; never routed to itself"
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b InstanceStatus) int {
		return cmpOr(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Counts counts the instances by state, and the routable ones.
func (c *Catalog) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := Counts{ByState: make(map[string]int, len(stateNames))}
	for _, s := range stateNames {
		n.ByState[s] = 0
	}
	n.ByState[groupState] = 0
	for _, e := range c.byID {
		if e.inst.Group {
			n.ByState[groupState]++
		} else if e.onStandby() {
			n.ByState[StateStandby.String()]++
		} else {
			n.ByState[e.inst.State.String()]++
		}
		if c.inRotation(e) { // verdict(e) == "", without building reasons: a scrape holds c.mu

			n.Routable++
		}
	}
	return n
}

// groupState is the state the admin API and metrics show a Group instance
// in.
const groupState = "group"

// onStandby reports a stopped or paused instance that Caddy wakes on a
// request (Docker scale to zero, a valid caddy.standby_after): what the
// admin API and metrics call standby, whoever stopped it.
func (e *entry) onStandby() bool {
	return e.wakeable() && (e.inst.State == StateStopped || e.inst.State == StatePaused)
}

// verdict is why e gets no requests whatever the route (R1-R4), or "":
// on a route without settings, or, when e names no port of its own and
// some route sets one, on such a route. c.mu is held.
func (c *Catalog) verdict(e *entry) string {
	route := Route{}
	if e.port == 0 && e.onlyPort == 0 {
		route.Port = c.anyRoutePort()
	}
	return e.why(route, &c.reach)
}

// anyRoutePort is the smallest port a route sets, 0 if none does. c.mu is
// held.
func (c *Catalog) anyRoutePort() int {
	least := 0
	for p := range c.routePorts {
		if least == 0 || p < least {
			least = p
		}
	}
	return least
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Candidate is one instance a route considered for a host, and what became
// of it.
type Candidate struct {
	Instance string
	// Target is set when requests go to the instance now, at Dial.
	Target bool
	Dial   string
	// PassiveFails is the number of recent failures Caddy's passive
	// health checks count at Dial (the admin API fills it in): with
	// max_fails at or below it, Caddy skips the target for fail_duration.
	PassiveFails int
	// Why says why requests go there ("routable", or the scale-to-zero
	// fallback, R5) or why not (an InstanceStatus verdict, or "caddy.host
	// lists only other hosts: ...").
	Why string
	// LabelTypos are its label keys that look like misspelt known labels
	// (R13c), each with the closest known one.
	LabelTypos []LabelTypo
}

// Explain says, for each instance route considers for host (from
// NormalizeHost), in name order, whether requests go to it now and why
// (not): what Targets answers, with its reasons.
func (s *Snapshot) Explain(route Route, host string) []Candidate {
	list, exact, _ := s.claimants(route, host, false)
	served, _ := s.candidates(route, host, false) // R2d: those of the path's prefix
	prefix := s.PathPrefix(route, host, false)
	targets, pick := s.Pick(nil, route, host, false)
	out := make([]Candidate, 0, len(list))
	for _, e := range list {
		c := Candidate{Instance: e.inst.Name, LabelTypos: LabelTypos(e.inst.Labels)}
		if i := slices.IndexFunc(targets, func(t Target) bool { return t.Instance == e.inst.Name }); i >= 0 {
			c.Target, c.Dial, c.Why = true, targets[i].Dial, "routable"
			if !e.routable(route.Network) {
				c.Why = "no instance is routable: " + e.notRoutable(route.Network) + ", woken by the requests (scale to zero)"
				if pick == PickedStandby {
					c.Why = "no instance is routable: on standby, woken by the requests (scale to zero)"
				}
			}
		} else if !e.servesHost(host, exact) {
			c.Why = "caddy.host lists only other hosts: " + ClipLabel(strings.TrimSpace(e.inst.Labels[LabelHost]))
			if e.overCap {
				c.Why = "caddy.host is over the cap of " + strconv.Itoa(MaxHostNames) + " names and " +
					strconv.Itoa(MaxHostLabelBytes) + " bytes (R2c): it claims no host"
			}
		} else if !slices.Contains(served, e) {
			c.Why = e.pathVerdict(prefix)
		} else if c.Why = e.why(route, s.reach); c.Why == "" {
			c.Why = "another instance is the scale-to-zero fallback"
		}
		out = append(out, c)
	}
	return out
}
