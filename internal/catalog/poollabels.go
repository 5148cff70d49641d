package catalog

import (
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Pools that grow under load (R5j) and dependencies woken first (R5k):
// the catalog parses the caddy.soft_limit and caddy.depends_on labels and
// answers what the connection that wakes instances asks of them; it
// decides nothing itself.

const (
	// MaxSoftLimit bounds caddy.soft_limit.
	MaxSoftLimit = 1_000_000
	// MaxDependsOnBytes bounds caddy.depends_on: a longer selector is not
	// parsed (a tenant's label costs bounded work).
	MaxDependsOnBytes = 1024
)

// poolLabels are an instance's caddy.soft_limit and caddy.depends_on.
type poolLabels struct {
	// softLimit is caddy.soft_limit; 0 when absent or bad.
	softLimit int32
	// maxRequests is caddy.max_requests (R5q, maxrequests.go); 0 when
	// absent or bad.
	maxRequests int32
	// dependsOn is caddy.depends_on; nil when absent or bad.
	dependsOn *selector.Selector
}

// parsePool reads caddy.soft_limit (a whole number from 1 to
// MaxSoftLimit) and caddy.depends_on (a non-empty selector of at most
// MaxDependsOnBytes); bad names the label whose value is not valid, ""
// if none.
func parsePool(labels map[string]string) (p poolLabels, bad string) {
	if raw, ok := labels[LabelSoftLimit]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 || n > MaxSoftLimit {
			bad = LabelSoftLimit
		} else {
			p.softLimit = int32(n)
		}
	}
	if n, badMax := parseMaxRequests(labels); badMax {
		bad = LabelMaxRequests
	} else {
		p.maxRequests = n
	}
	if raw, ok := labels[LabelDependsOn]; ok {
		sel, err := selector.Parse(raw)
		if len(raw) > MaxDependsOnBytes || err != nil || sel.Empty() {
			bad = LabelDependsOn
		} else {
			p.dependsOn = &sel
		}
	}
	return p, bad
}

// warnPool warns once per change of the label that e's caddy.soft_limit or
// caddy.depends_on is not valid (old: the entry e replaces, nil: none).
func (c *Catalog) warnPool(old, e *entry) {
	bad := e.note().badPool
	if bad == "" || old != nil && old.inst.Labels[bad] == e.inst.Labels[bad] {
		return
	}
	c.logger.Warn("label "+bad+" is not valid and is ignored (caddy.soft_limit: a whole number from 1 to "+
		strconv.Itoa(MaxSoftLimit)+"; caddy.max_requests: a whole number from 1 to "+strconv.Itoa(MaxMaxRequests)+"; caddy.depends_on: a label selector of at most "+
		strconv.Itoa(MaxDependsOnBytes)+" bytes, not empty)",
		zap.String("instance", e.inst.Name), zap.String(bad, ClipLabel(e.inst.Labels[bad])))
}

// wakeable reports an instance Caddy wakes and puts on standby (a valid
// caddy.standby_after). A group (a Swarm service with endpoint tasks) is
// never routed to, so never woken.
func (e *entry) wakeable() bool { return e.activity != nil && e.standby.After > 0 && !e.inst.Group }

// ready: running, accepting connections (R1a) and not unhealthy or
// awaiting its health verdict, whatever the network (R1).
func (e *entry) ready() bool {
	return e.inst.State == StateRunning && e.isListening() &&
		(e.inst.Health == HealthNone || e.inst.Health == HealthHealthy)
}

// Loaded reports whether every target has a soft limit (caddy.soft_limit)
// and more requests in flight than it (R5j, Activity.Load), or the route
// has requests waiting for a slot (Queued, R5q): the route's pool is to
// grow. It reads atomics only.
func Loaded(targets []Target) bool {
	for _, t := range targets {
		if t.SoftLimit <= 0 || t.Activity == nil || !t.Queued && t.Activity.Load() <= int(t.SoftLimit) {
			return false
		}
	}
	return len(targets) > 0
}

// InstanceReady reports whether the instance id is running and accepting
// connections, as Sleeper.Ready.
func (c *Catalog) InstanceReady(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	return e != nil && e.ready()
}

// PoolCounts is how many instances labelled caddy.soft_limit run
// (running or starting) and how many are on standby (R5j).
func (c *Catalog) PoolCounts() (running, standby int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byID {
		if e.pool.softLimit == 0 {
			continue
		}
		switch {
		case e.inst.State == StateRunning || e.inst.State == StateStarting:
			running++
		case e.onStandby() || e.inst.State == StateStandby:
			standby++
		}
	}
	return running, standby
}

// Recent tells which instances a connection connected to lately, to wake
// them (see NextToConnect).
type Recent interface {
	// Recent reports whether the instance id was connected to lately.
	Recent(id string) bool
}

// ConnectWake is an instance on standby that a connection to Dial, one of
// its published ports, wakes (Dicer's wake on connect).
type ConnectWake struct {
	ID, Name string
	// Dial is host:port of the published port, as a request would dial it
	// (R4).
	Dial string
}

// NextToConnect returns the instance on standby that a pool of route for
// host grows by on a daemon that wakes instances on connect (R5j on
// Dicer): the first of the route's candidates for host in name order
// (R5's order) whose daemon wakes it by a connection to a published port
// Caddy reaches. There is none while one of those candidates is on its way
// up (starting, or running and not ready yet), nor while the first on
// standby was connected to lately (recent): that connection is the growth
// under way. Instances in maintenance (R5i) and those the daemon does not
// wake (no standby_after) are skipped. No allocation unless it finds one.
func (s *Snapshot) NextToConnect(route Route, host string, recent Recent) (ConnectWake, bool) {
	candidates, exact := s.candidates(route, host, false)
	for _, e := range candidates {
		if e.connectWakeable(host, exact) && e.awaitingVerdict() {
			return ConnectWake{}, false
		}
	}
	for _, e := range candidates {
		if !e.connectWakeable(host, exact) || e.inst.State != StateStandby {
			continue
		}
		if _, _, published := e.place(route, s.reach); !published {
			continue
		}
		if recent.Recent(e.inst.ID) {
			return ConnectWake{}, false
		}
		return ConnectWake{ID: e.inst.ID, Name: e.inst.Name, Dial: e.resolve(route, s.reach).dial}, true
	}
	return ConnectWake{}, false
}

// connectWakeable reports an instance that its daemon wakes on connect,
// not in maintenance (R5i), that may serve host.
func (e *entry) connectWakeable(host string, exact bool) bool {
	return e.inst.WakeOnConnect && !e.maint && e.servesHost(host, exact)
}
