package catalog

import "sync/atomic"

// An instance's dial address is worked out once, not for every request:
// resolve spells the address and joins it with the port, an allocation
// that a request would otherwise pay for each instance it is offered
// (docs/benchmarks.md, "CPU per request"). Each entry remembers the
// endpoints of the last dialSlots routes it resolved, each with the
// route's port and network, the reach and the spelling number it was
// resolved for; a request reads them with one atomic load each, the latest
// first, so an instance served on one route reads the first slot only.
// Sites reaching the same instances on different ports or networks, and
// the readiness probe's own ports, each keep theirs: taking turns costs
// them nothing. A fifth route pushes out the one resolved longest ago.
//
// The memory is shared by an entry and its copies (amend, readiness and
// maintenance copy an entry to change its state, weight or events, never
// its ports, networks or labels, which are what a dial depends on), so a
// copy starts with it; the spelling number, which a replacing entry takes
// over, is part of what it is checked against.

// dialSlots is how many routes' endpoints an entry remembers.
const dialSlots = 4

// dialMemo is an endpoint resolve worked out, and what for.
type dialMemo struct {
	port    int
	network string
	at      *reach
	apart   uint32
	ep      endpoint
}

// dialMemory holds an entry's latest dialMemos, the latest first, filled
// in order (a nil slot has none after it); nil in an entry built without
// newEntry (tests), which then resolves every time. Two routes kept at
// once may lose one of them: it is resolved again by its next request.
type dialMemory struct {
	slots [dialSlots]atomic.Pointer[dialMemo]
}

// recall returns the endpoint remembered for route, at and apart.
func (m *dialMemory) recall(route Route, at *reach, apart uint32) (endpoint, bool) {
	if m == nil {
		return endpoint{}, false
	}
	for i := range m.slots {
		d := m.slots[i].Load()
		if d == nil {
			break
		}
		if d.port == route.Port && d.network == route.Network && d.at == at && d.apart == apart {
			return d.ep, true
		}
	}
	return endpoint{}, false
}

// keep remembers ep as the endpoint for route, at and apart, in the first
// slot; the others move down one, the last falls out.
func (m *dialMemory) keep(route Route, at *reach, apart uint32, ep endpoint) {
	if m == nil {
		return
	}
	for i := len(m.slots) - 1; i > 0; i-- {
		m.slots[i].Store(m.slots[i-1].Load())
	}
	m.slots[0].Store(&dialMemo{port: route.Port, network: route.Network, at: at, apart: apart, ep: ep})
}
