package catalog

import (
	"net/netip"
	"strconv"
	"strings"
)

// Why an instance's dial address may have several spellings (R1d):
//
// Caddy keeps its passive health state (fails, requests in flight) per
// dial address, for up to an hour. When a new instance takes an address an
// old one had (Docker hands out the lowest free IP on a network, and a
// compose recreate gets the same one), it would inherit the old one's
// failures and get no requests for fail_duration. So the catalog
// remembers, for each address and published port (a place), the instance
// that last had it and the number it spelt it with, and a different
// instance at that place is dialled under a higher-numbered spelling: the
// same address, written differently.
//
// A freeze of the same instance (standby, pause) keeps its spelling, so
// that {upstream_hostport}, access logs, lb_policy cookie and the hash
// policies, and passive health see one address for it. Connections kept
// alive from before a freeze are dropped instead (R5a): the catalog tells
// Options.Froze, and the proxy closes its idle connections.

// maxPlaces bounds the places the catalog remembers a spelling for; past
// it, an arbitrary one is forgotten for each new one.
const maxPlaces = 1 << 16

// spelt is the instance that last had a place, and its spelling number.
type spelt struct {
	id string
	n  uint32
}

// spellApart raises e's spelling number above the one another instance
// last used at one of e's places (its addresses and published ports), if
// that one is no longer there (instances that share a place at once, as
// on a host network, share its state as Caddy keeps it), then records e at
// them. live looks the instances up by ID (c.byID, or a listing being
// applied). c.mu is held.
func (c *Catalog) spellApart(e *entry, live func(id string) *entry) {
	e.eachPlace(func(place string) {
		s, ok := c.spelt[place]
		if !ok || s.id == e.inst.ID || e.apart > s.n {
			return
		}
		if other := live(s.id); other != nil && other.hasPlace(place) {
			return
		}
		e.apart = s.n + 1
	})
	e.eachPlace(func(place string) {
		if _, ok := c.spelt[place]; !ok && len(c.spelt) >= maxPlaces {
			for k := range c.spelt {
				delete(c.spelt, k)
				break
			}
		}
		c.spelt[place] = spelt{id: e.inst.ID, n: e.apart}
	})
}

// hasPlace reports whether place is one of e's.
func (e *entry) hasPlace(place string) bool {
	found := false
	e.eachPlace(func(p string) { found = found || p == place })
	return found
}

// eachPlace calls f with each place requests for e may go to: its address
// on each network, and each TCP port it publishes (host address and port).
func (e *entry) eachPlace(f func(place string)) {
	for _, n := range e.inst.Networks {
		if n.Address != "" {
			f(n.Address)
		}
	}
	for _, p := range e.inst.Ports {
		if p.Protocol == TCP && p.HostPort != 0 {
			f("published " + p.HostIP + " " + strconv.Itoa(int(p.HostPort)))
		}
	}
}

// spelling returns the n-th spelling of host (an IP address or a DNS name)
// that dials the same address; the 0th is host itself.
//
//   - An IPv4 address is written as an IPv4-mapped IPv6 address with its
//     zero groups padded to different widths and "ffff" in different cases,
//     16,384 spellings before they repeat: 10.0.0.1 becomes
//     [0:0:0:0:0:ffff:10.0.0.1], [00:0:0:0:0:ffff:10.0.0.1], ...
//   - An IPv6 address is written out in full, with groups padded to
//     different widths and hex letters in different cases; one whose groups
//     all have four digits and no letter has no other spelling.
//   - A DNS name has the case of its letters changed (resolvers ignore it);
//     a name without letters has no other spelling.
func spelling(host string, n uint32) string {
	if n == 0 {
		return host
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nameSpelling(host, n)
	}
	if ip.Zone() != "" {
		return host
	}
	ip = ip.Unmap()
	var groups []string
	a := ip.As16()
	tail := ""
	if ip.Is4() {
		groups = []string{"0", "0", "0", "0", "0", "ffff"}
		tail = ":" + ip.String()
	} else {
		groups = make([]string, 8)
		for i := range groups {
			groups[i] = strconv.FormatUint(uint64(a[2*i])<<8|uint64(a[2*i+1]), 16)
		}
	}
	// Mixed radix: each group contributes (5-len) widths times 2^letters
	// cases.
	capacity := uint64(1)
	for _, g := range groups {
		capacity *= groupVariants(g)
	}
	if capacity == 1 {
		return host
	}
	idx := uint64(n-1) % capacity
	if spellGroups(groups, tail, 0) == host {
		// An IPv6 address already written out in full is the 0th way of
		// writing its groups: skip it.
		idx = 1 + uint64(n-1)%(capacity-1)
	}
	return spellGroups(groups, tail, idx)
}

// spellGroups writes hex groups the idx-th way (a mixed-radix number: each
// group contributes groupVariants digits), then tail.
func spellGroups(groups []string, tail string, idx uint64) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteByte(':')
		}
		v := groupVariants(g)
		writeGroup(&b, g, idx%v)
		idx /= v
	}
	b.WriteString(tail)
	return b.String()
}

// groupVariants is how many ways one hex group (lowercase, no leading
// zeros) can be written: 4-digit padding widths times letter cases.
func groupVariants(g string) uint64 {
	return uint64(5-len(g)) << letters(g)
}

// writeGroup writes the v-th way of writing hex group g: v's low bits pick
// the case of each letter, the rest the number of leading zeros.
func writeGroup(b *strings.Builder, g string, v uint64) {
	k := letters(g)
	cases, pad := v&(1<<k-1), v>>k
	for range pad {
		b.WriteByte('0')
	}
	bit := 0
	for i := 0; i < len(g); i++ {
		c := g[i]
		if c >= 'a' && c <= 'f' {
			if cases>>bit&1 == 1 {
				c -= 'a' - 'A'
			}
			bit++
		}
		b.WriteByte(c)
	}
}

func letters(s string) int {
	k := 0
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c >= 'a' && c <= 'z' {
			k++
		}
	}
	return k
}

// nameSpelling flips the case of the letters of a DNS name by the bits of
// a number from 1 to 2^letters-1 (never 0, which would be name itself).
func nameSpelling(name string, n uint32) string {
	k := min(letters(name), 32)
	if k == 0 {
		return name
	}
	flips := uint64(n-1)%(1<<k-1) + 1
	b := []byte(name)
	bit := 0
	for i, c := range b {
		if l := c | 0x20; l >= 'a' && l <= 'z' && bit < k {
			if flips>>bit&1 == 1 {
				b[i] = c ^ 0x20
			}
			bit++
		}
	}
	return string(b)
}
