package clients

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
	b := NewBudget(2, time.Minute)
	b.now = func() time.Time { return now }
	a, _ := Of(&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1})
	other, _ := Of(&net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 1})
	v6a, _ := Of(&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1})
	v6b, _ := Of(&net.TCPAddr{IP: net.ParseIP("2001:db8::ffff:1"), Port: 2})
	if v6a != v6b {
		t.Fatalf("%s and %s are one /64", v6a, v6b)
	}
	for range 2 {
		if !b.Allows(a) {
			t.Fatal("refused within the limit")
		}
		b.Spend(a)
	}
	if b.Allows(a) {
		t.Error("allowed past the limit")
	}
	if !b.Allows(other) {
		t.Error("another address paid for the first")
	}
	now = now.Add(time.Minute)
	if !b.Allows(a) {
		t.Error("still refused once the window passed")
	}
}

// R5n: the budget remembers at most MaxClients addresses; past that, a
// new one starts nothing until windows close, and the map stays bounded.
func TestClientBudget_R5n_bounded(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBudget(1, time.Minute)
	b.now = func() time.Time { return now }
	for i := range MaxClients + 500 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		if b.Allows(p) {
			b.Spend(p)
		}
	}
	if len(b.clients) > MaxClients {
		t.Fatalf("%d addresses remembered", len(b.clients))
	}
	late := netip.MustParsePrefix("192.0.2.9/32")
	if b.Allows(late) {
		t.Error("a new address allowed with the map full")
	}
	now = now.Add(time.Minute)
	if !b.Allows(late) {
		t.Error("still refused once the windows closed")
	}
}

// R14c, R5d: a client holds at most its share at once; another client
// still takes its own; what is given back can be taken again, and a
// client that holds nothing leaves the table.
func TestShare_R14c_per_client(t *testing.T) {
	s := NewShare(2)
	a := netip.MustParsePrefix("192.0.2.1/32")
	b := netip.MustParsePrefix("192.0.2.2/32")
	for range 2 {
		if !s.Take(a) {
			t.Fatal("refused within the share")
		}
	}
	if s.Take(a) {
		t.Error("took past the share")
	}
	if !s.Take(b) {
		t.Error("another client refused for the first one's share")
	}
	s.Give(a)
	if !s.Take(a) {
		t.Error("refused after giving one back")
	}
	s.Give(a)
	s.Give(a)
	s.Give(b)
	if len(s.held) != 0 {
		t.Errorf("%d clients remembered holding nothing", len(s.held))
	}
}

// R14c, R5d: the table of a Share keeps at most MaxClients clients.
func TestShare_R14c_bounded(t *testing.T) {
	s := NewShare(1)
	for i := range MaxClients + 10 {
		s.Take(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32))
	}
	if len(s.held) > MaxClients {
		t.Fatalf("%d clients remembered", len(s.held))
	}
}

// The key of an address: IPv4 /32 (also mapped in IPv6), IPv6 /64, with
// or without a port; not an IP: none.
func TestOf_R14c_keys(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7:443":         "192.0.2.7/32",
		"192.0.2.7":             "192.0.2.7/32",
		"[::ffff:192.0.2.7]:80": "192.0.2.7/32",
		"[2001:db8::1]:443":     "2001:db8::/64",
		"2001:db8:0:0:ffff::1":  "2001:db8::/64",
		"[fe80::1%eth0]:1":      "fe80::/64",
	} {
		got, ok := OfString(in)
		if !ok || got.String() != want {
			t.Errorf("OfString(%q) = %s, %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := OfString("/run/caddy.sock"); ok {
		t.Error("a unix socket has a key")
	}
	got, ok := Of(&net.TCPAddr{IP: net.ParseIP("2001:db8::9"), Port: 1})
	if !ok || got.String() != "2001:db8::/64" {
		t.Errorf("Of(TCPAddr) = %s, %v", got, ok)
	}
	if _, ok := Of(&net.UnixAddr{Name: "/run/x", Net: "unix"}); ok {
		t.Error("a unix address has a key")
	}
	for limit, want := range map[int]int{1: 1, 3: 3, 10: 4, 32: 4, 1000: 125, 1024: 128} {
		if got := ShareOf(limit); got != want {
			t.Errorf("ShareOf(%d) = %d, want %d", limit, got, want)
		}
	}
}
