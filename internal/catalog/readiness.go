package catalog

import (
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Readiness (R1a): a running instance without a health check joins
// rotations only once its port accepts a TCP connection, not as soon as
// its daemon says it runs, since an app binds its port a moment after it
// starts. The catalog asks Options.Probe to check where requests would go
// and holds the instance out of rotations (a fallback to wake, R5, it may
// still be) until MarkReady. Nothing of this runs on a request.

// ProbeRequest asks for one instance to be checked for readiness.
type ProbeRequest struct {
	// ID and Name are the instance's.
	ID, Name string
	// Dials are where requests for the instance would go (host:port, one
	// per port its routes use): it is ready once one of them accepts a TCP
	// connection.
	Dials []string
	// Image is the instance's Image, or its name when that is unknown:
	// the prober learns start times by it (R1a).
	Image string
	// Gen identifies this request; MarkReady takes it back, so that an
	// answer to an older request (the instance restarted meanwhile) is
	// ignored.
	Gen uint64
}

// AddRoutePort records that a route sends requests to port (its port
// setting; 0 for none), so that instances that name no port of their own
// are probed there. Release it with RemoveRoutePort.
func (c *Catalog) AddRoutePort(port int) {
	if port <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.routePorts) > 0 {
		c.routePorts[port]++
		return
	}
	// The first route port gives a port to the instances that had none
	// (R3): they join their rotations now.
	var had []*entry
	for _, e := range c.byID {
		if !c.inRotation(e) {
			had = append(had, e)
		}
	}
	c.routePorts[port]++
	for _, e := range had {
		if c.inRotation(e) && c.relevant(e) {
			why := "running, on a route's port " + strconv.Itoa(port)
			c.logger.Info("instance joins rotation", zap.String("instance", e.inst.Name), zap.String("why", why))
			c.tellLifecycle(Joined, e, why)
		}
	}
}

// RemoveRoutePort releases a port from AddRoutePort.
func (c *Catalog) RemoveRoutePort(port int) {
	if port <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.routePorts[port]--; c.routePorts[port] <= 0 {
		delete(c.routePorts, port)
	}
}

// MarkReady lets the instance of a ProbeRequest join its rotations, unless
// it changed since (another Gen). accepted says whether it did accept a
// connection, or the prober gave up waiting (it joins then too, and the
// log says so).
func (c *Catalog) MarkReady(id string, gen uint64, accepted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil || e.probeGen != gen || e.verdict == nil || e.isListening() {
		return
	}
	before := *e
	before.verdict = nil // as it was: held out, waiting
	state := verdictAccepted
	if !accepted {
		state = verdictGaveUp
	}
	e.verdict.state.Store(state) // in place: see probeVerdict
	c.noteSleeper(&before, e)    // R5l
	snap := *c.current.Load()    // the same indexes: a new snapshot wakes who waits for a change
	c.store(&snap)
	c.logChange(&before, e, "")
}

// admit decides whether e, which replaces old (nil: none), must be probed
// before it joins rotations, and if so returns the request to send (Gen 0:
// none). An instance that keeps running at the same places keeps its
// verdict; one that (re)starts, or moves, is probed again. Only instances
// a route or the permission could use (relevant) are probed (R1b): the
// others (a database beside the apps, say) get no connection and no
// warning, and are admitted unprobed until a label or a route's selector
// makes them relevant (then they are probed: probeWatched).
func (c *Catalog) admit(old, e *entry) ProbeRequest {
	if c.probe == nil || e.inst.State != StateRunning || e.inst.Health != HealthNone {
		return ProbeRequest{}
	}
	relevant := c.relevant(e)
	if old != nil && old.inst.State == StateRunning && old.inst.Health == HealthNone && samePlace(old, e) &&
		!(relevant && unprobed(old) && !c.relevant(old)) {
		e.listening, e.probeGen, e.verdict, e.probeDials = old.listening, old.probeGen, old.verdict, old.probeDials
		return ProbeRequest{}
	}
	if !relevant {
		return ProbeRequest{} // admitted unprobed: newEntry's listening
	}
	return c.startProbe(e)
}

// startProbe holds e out of its rotations until the verdict on the request
// it returns (Gen 0: nothing to probe).
func (c *Catalog) startProbe(e *entry) ProbeRequest {
	dials := c.probeDials(e)
	if len(dials) == 0 {
		return ProbeRequest{} // no port or address: R3 and R1 keep it out anyway
	}
	c.probeGen++
	e.listening, e.probeGen, e.verdict, e.probeDials = false, c.probeGen, new(probeVerdict), dials
	image := e.inst.Image
	if image == "" {
		image = e.inst.Name
	}
	return ProbeRequest{ID: e.inst.ID, Name: e.inst.Name, Image: image, Dials: dials, Gen: e.probeGen}
}

// unprobed reports a running instance admitted without a probe: one no
// route could use (admit), or one with nothing to probe yet.
func unprobed(e *entry) bool {
	return e.inst.State == StateRunning && e.inst.Health == HealthNone && e.listening && e.probeGen == 0
}

// probeWatched probes the running instances that sel, a selector about to
// be watched, makes relevant (R1b): admitted unprobed while no route could
// use them, they are held out of the new route's rotation until their
// port accepts, like a new instance. Watch calls it before the view joins
// c.views; c.mu is held. No snapshot changes: an instance no route could
// use is in no index.
func (c *Catalog) probeWatched(sel selector.Selector) {
	if c.probe == nil {
		return
	}
	for id, old := range c.byID {
		if !unprobed(old) || !sel.Matches(old.inst.Labels) || c.relevant(old) {
			continue
		}
		e := *old
		if r := c.startProbe(&e); r.Gen != 0 {
			c.byID[id] = &e
			c.noteSleeper(old, &e) // R5l: not ready now
			c.probe(r)
		}
	}
}

// probeDials are where requests for e would go on each port its routes may
// use (R3, R4): its caddy.port, else its only published port and every
// route's port setting.
func (c *Catalog) probeDials(e *entry) []string {
	var ports []int
	switch {
	case e.port < 0:
		return nil
	case e.port > 0:
		ports = []int{int(e.port)}
	default:
		for p := range c.routePorts {
			if p != int(e.onlyPort) {
				ports = append(ports, p)
			}
		}
		slices.Sort(ports)
		if e.onlyPort > 0 {
			ports = slices.Insert(ports, 0, int(e.onlyPort))
		}
	}
	var dials []string
	for _, p := range ports {
		if ep := e.resolve(Route{Port: p}, &c.reach); ep.dial != "" && !slices.Contains(dials, ep.dial) {
			dials = append(dials, ep.dial)
		}
	}
	return dials
}

// samePlace reports whether requests for e go where they went for old:
// same caddy.port, networks (and addresses) and published ports. A
// re-listing that finds a running instance where it was keeps its verdict.
func samePlace(old, e *entry) bool {
	return old.inst.Labels[LabelPort] == e.inst.Labels[LabelPort] &&
		old.inst.Labels[LabelNetwork] == e.inst.Labels[LabelNetwork] &&
		slices.Equal(old.inst.Networks, e.inst.Networks) &&
		slices.Equal(old.inst.Ports, e.inst.Ports)
}
