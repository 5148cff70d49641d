package listeners

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// maxClients bounds the client addresses a clientBudget remembers: at
// about 80 bytes each, 10,000 of them are under 1 MiB.
const maxClients = 10000

// clientBudget bounds the pre-wakes each client address starts: at most
// limit per window (R5n). An IPv6 client is its /64, which one host
// usually holds whole. Beyond maxClients addresses with a window open, a
// new address starts none until windows close: a request still wakes as
// it always does.
type clientBudget struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	clients   map[netip.Prefix]*clientWindow
	lastSweep time.Time
}

type clientWindow struct {
	start time.Time
	used  int
}

func newClientBudget(limit int, window time.Duration) *clientBudget {
	return &clientBudget{limit: limit, window: window, now: time.Now, clients: map[netip.Prefix]*clientWindow{}}
}

// clientOf is the key of a remote address: its IPv4 address, or its IPv6
// /64; ok is false for an address that is not IP (a unix socket).
func clientOf(addr net.Addr) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Prefix{}, false
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32), true
	}
	p, err := ip.Prefix(64)
	return p, err == nil
}

// allows reports whether client may start a pre-wake now.
func (b *clientBudget) allows(client netip.Prefix) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.current(client)
	if w == nil {
		return len(b.clients) < maxClients || b.sweep()
	}
	return w.used < b.limit
}

// spend counts a pre-wake client started.
func (b *clientBudget) spend(client netip.Prefix) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.current(client)
	if w == nil {
		if len(b.clients) >= maxClients && !b.sweep() {
			return
		}
		w = &clientWindow{start: b.now()}
		b.clients[client] = w
	}
	w.used++
}

// current is client's open window, nil if it has none.
func (b *clientBudget) current(client netip.Prefix) *clientWindow {
	w := b.clients[client]
	if w != nil && b.now().Sub(w.start) >= b.window {
		delete(b.clients, client)
		return nil
	}
	return w
}

// sweep forgets the windows that closed, at most once a second (a full
// map costs a pass over maxClients), and reports whether there is room
// for another client now.
func (b *clientBudget) sweep() bool {
	now := b.now()
	if now.Sub(b.lastSweep) < time.Second {
		return false
	}
	b.lastSweep = now
	for k, w := range b.clients {
		if now.Sub(w.start) >= b.window {
			delete(b.clients, k)
		}
	}
	return len(b.clients) < maxClients
}
