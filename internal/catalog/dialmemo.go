package catalog

import "sync/atomic"

// An instance's dial address is worked out once, not for every request:
// resolve spells the address and joins it with the port, an allocation
// that a request would otherwise pay for each instance it is offered
// (docs/benchmarks.md, "CPU per request"). Each entry remembers the last
// endpoint it resolved and the route's port and network, the reach and
// the spelling number it resolved it for; a request for the same route
// reads it with one atomic load. A route with another port or network
// replaces it: an entry that several such routes share resolves again
// when they take turns, as every request did before.
//
// The memory is shared by an entry and its copies (amend, readiness and
// maintenance copy an entry to change its state, weight or events, never
// its ports, networks or labels, which are what a dial depends on), so a
// copy starts with it; the spelling number, which a replacing entry takes
// over, is part of what it is checked against.

// dialMemo is an endpoint resolve worked out, and what for.
type dialMemo struct {
	port    int
	network string
	at      *reach
	apart   uint32
	ep      endpoint
}

// dialMemory holds an entry's latest dialMemo; nil in an entry built
// without newEntry (tests), which then resolves every time.
type dialMemory struct{ last atomic.Pointer[dialMemo] }

// recall returns the endpoint remembered for route, at and apart.
func (m *dialMemory) recall(route Route, at *reach, apart uint32) (endpoint, bool) {
	if m == nil {
		return endpoint{}, false
	}
	d := m.last.Load()
	if d == nil || d.port != route.Port || d.network != route.Network || d.at != at || d.apart != apart {
		return endpoint{}, false
	}
	return d.ep, true
}

// keep remembers ep as the endpoint for route, at and apart.
func (m *dialMemory) keep(route Route, at *reach, apart uint32, ep endpoint) {
	if m != nil {
		m.last.Store(&dialMemo{port: route.Port, network: route.Network, at: at, apart: apart, ep: ep})
	}
}
