package listeners

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// R5n: a client address starts at most limit pre-wakes per window; an
// IPv6 client is its /64; the window opens again once it has passed.
func TestClientBudget_R5n_per_address(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newClientBudget(2, time.Minute)
	b.now = func() time.Time { return now }
	a, _ := clientOf(&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1})
	other, _ := clientOf(&net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 1})
	v6a, _ := clientOf(&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1})
	v6b, _ := clientOf(&net.TCPAddr{IP: net.ParseIP("2001:db8::ffff:1"), Port: 2})
	if v6a != v6b {
		t.Fatalf("%s and %s are one /64", v6a, v6b)
	}
	for range 2 {
		if !b.allows(a) {
			t.Fatal("refused within the limit")
		}
		b.spend(a)
	}
	if b.allows(a) {
		t.Error("allowed past the limit")
	}
	if !b.allows(other) {
		t.Error("another address paid for the first")
	}
	now = now.Add(time.Minute)
	if !b.allows(a) {
		t.Error("still refused once the window passed")
	}
}

// R5n: the budget remembers at most maxClients addresses; past that, a
// new one starts nothing until windows close, and the map stays bounded.
func TestClientBudget_R5n_bounded(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newClientBudget(1, time.Minute)
	b.now = func() time.Time { return now }
	for i := range maxClients + 500 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		if b.allows(p) {
			b.spend(p)
		}
	}
	if len(b.clients) > maxClients {
		t.Fatalf("%d addresses remembered", len(b.clients))
	}
	late := netip.MustParsePrefix("192.0.2.9/32")
	if b.allows(late) {
		t.Error("a new address allowed with the map full")
	}
	now = now.Add(time.Minute)
	if !b.allows(late) {
		t.Error("still refused once the windows closed")
	}
}
