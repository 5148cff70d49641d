// Package clients is the one table of client addresses that the waiting
// caps an outsider can fill share (R5d, R5n, R14c): a client is its IPv4
// address, or its IPv6 /64, which one host usually holds whole. A Budget
// bounds what each client starts per window (pre-wakes, R5n); a Share
// bounds what each client holds at once of a cap (connections waiting for
// their first bytes, R14c; requests and connections held for a wake,
// R5d). Both keep at most MaxClients addresses. No Caddy import.
package clients

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// MaxClients bounds the client addresses a table remembers: at about 80
// bytes each, 10,000 of them are under 1 MiB.
const MaxClients = 10000

// Of is the key of a remote address: its IPv4 address, or its IPv6 /64;
// ok is false for an address that is not IP (a unix socket).
func Of(addr net.Addr) (netip.Prefix, bool) {
	if addr == nil {
		return netip.Prefix{}, false
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(tcp.IP)
		if !ok {
			return netip.Prefix{}, false
		}
		return OfAddr(ip)
	}
	return OfString(addr.String())
}

// OfString is Of for an address written as host:port or as an IP alone
// (an http.Request's RemoteAddr, Caddy's client_ip).
func OfString(s string) (netip.Prefix, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return OfAddr(ap.Addr())
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return OfAddr(ip)
}

// OfAddr is Of for an IP address.
func OfAddr(ip netip.Addr) (netip.Prefix, bool) {
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32), true
	}
	p, err := ip.Prefix(64)
	return p, err == nil
}

type ctxKey struct{}

// With returns ctx carrying client, for a cap further down the call
// (standby.Waker.Hold) to count it under its share.
func With(ctx context.Context, client netip.Prefix) context.Context {
	return context.WithValue(ctx, ctxKey{}, client)
}

// From is the client With put in ctx; ok is false if none was.
func From(ctx context.Context) (netip.Prefix, bool) {
	p, ok := ctx.Value(ctxKey{}).(netip.Prefix)
	return p, ok
}

// ShareOf is the default share of a cap one client may hold at once: an
// eighth of it, at least 4 (and never more than the cap).
func ShareOf(limit int) int {
	return min(max(limit/8, 4), limit)
}

// Share bounds what each client holds at once of a cap: at most Limit
// each. Its table has an entry only for a client that holds something
// now, so it is as large as the cap at most, and never beyond MaxClients:
// past that a new client holds nothing until others let go.
type Share struct {
	limit int

	mu   sync.Mutex
	held map[netip.Prefix]int
}

// NewShare is a Share of limit per client.
func NewShare(limit int) *Share {
	return &Share{limit: limit, held: map[netip.Prefix]int{}}
}

// Limit is what one client may hold at once.
func (s *Share) Limit() int { return s.limit }

// Take counts one more held by client, unless it holds its share already
// (or the table is full); then it reports false. Give it back with Give.
func (s *Share) Take(client netip.Prefix) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.held[client]
	if n >= s.limit || !ok && len(s.held) >= MaxClients {
		return false
	}
	s.held[client] = n + 1
	return true
}

// Give gives back one that client took.
func (s *Share) Give(client netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[client]; n > 1 {
		s.held[client] = n - 1
	} else {
		delete(s.held, client)
	}
}

// Held is how many client holds now.
func (s *Share) Held(client netip.Prefix) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[client]
}

// Budget bounds what each client starts: at most limit per window (R5n's
// pre-wakes). Beyond MaxClients addresses with a window open, a new
// address starts none until windows close.
type Budget struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	clients   map[netip.Prefix]*window
	lastSweep time.Time
}

type window struct {
	start time.Time
	used  int
}

// NewBudget is a Budget of limit per window.
func NewBudget(limit int, per time.Duration) *Budget {
	return &Budget{limit: limit, window: per, now: time.Now, clients: map[netip.Prefix]*window{}}
}

// Allows reports whether client may start one more now.
func (b *Budget) Allows(client netip.Prefix) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.current(client)
	if w == nil {
		return len(b.clients) < MaxClients || b.sweep()
	}
	return w.used < b.limit
}

// Spend counts one client started.
func (b *Budget) Spend(client netip.Prefix) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.current(client)
	if w == nil {
		if len(b.clients) >= MaxClients && !b.sweep() {
			return
		}
		w = &window{start: b.now()}
		b.clients[client] = w
	}
	w.used++
}

// current is client's open window, nil if it has none.
func (b *Budget) current(client netip.Prefix) *window {
	w := b.clients[client]
	if w != nil && b.now().Sub(w.start) >= b.window {
		delete(b.clients, client)
		return nil
	}
	return w
}

// sweep forgets the windows that closed, at most once a second (a full
// map costs a pass over MaxClients), and reports whether there is room
// for another client now.
func (b *Budget) sweep() bool {
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
	return len(b.clients) < MaxClients
}
