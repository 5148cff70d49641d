package catalog

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Idle by activity (R5r): the catalog parses caddy.standby_cpu and
// caddy.standby_ignore and hands them on, the first in the Standby policy
// to the idle loop (internal/standby), the second with each target to the
// request path; it decides nothing itself.

const (
	// LabelStandbyCPU keeps a container labelled caddy.standby_after awake
	// while its CPU, in percent of one core (100: one core busy, as
	// `docker stats` shows it), is above this value when it is due for
	// standby (R5r): `50`, `12.5` or `50%`. Docker only.
	LabelStandbyCPU = "caddy.standby_cpu"
	// LabelStandbyIgnore lists the requests that neither wake the
	// instance nor keep it awake (R5r): comma-separated items, each
	// `cidr:<address or prefix>` (the client's address), `path:<prefix>`
	// (the request's path, by whole segments) or `ua:<text>` (in the
	// User-Agent, ASCII case ignored). Example:
	// `ua:UptimeRobot,path:/healthz,cidr:10.0.0.0/8`.
	LabelStandbyIgnore = "caddy.standby_ignore"

	// MaxStandbyCPU bounds caddy.standby_cpu: 1024 cores.
	MaxStandbyCPU = 102_400
	// MaxIgnoreBytes bounds caddy.standby_ignore's value, and
	// MaxIgnoreItems its items; MaxIgnoreItemBytes bounds one item's
	// value (a path prefix, a User-Agent text).
	MaxIgnoreBytes     = 1024
	MaxIgnoreItems     = 16
	MaxIgnoreItemBytes = 128
	// IgnoreUABytes is how much of a request's User-Agent a `ua:` item
	// is looked for in: its first 512 bytes.
	IgnoreUABytes = 512
)

// parseStandbyCPU reads caddy.standby_cpu: a number above 0 and at most
// MaxStandbyCPU, with an optional `%`; 0 when absent, bad set when present
// and not valid (then it counts as absent).
func parseStandbyCPU(labels map[string]string) (pct float64, bad bool) {
	raw, ok := labels[LabelStandbyCPU]
	if !ok {
		return 0, false
	}
	v := strings.TrimSuffix(strings.TrimSpace(raw), "%")
	if len(v) > 16 {
		return 0, true
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f > 0) || f > MaxStandbyCPU {
		return 0, true
	}
	return f, false
}

// Ignore is an instance's caddy.standby_ignore: the requests that neither
// wake it nor count as its activity (R5r). Immutable once parsed; nil
// matches nothing.
type Ignore struct {
	cidrs []netip.Prefix
	paths []string
	uas   [][]byte // lower case
}

// ParseIgnore parses a caddy.standby_ignore value (see
// LabelStandbyIgnore); an error says what is wrong with it.
func ParseIgnore(raw string) (*Ignore, error) {
	if len(raw) > MaxIgnoreBytes {
		return nil, errorf("longer than %d bytes", MaxIgnoreBytes)
	}
	items := strings.Split(raw, ",")
	if len(items) > MaxIgnoreItems {
		return nil, errorf("more than %d items", MaxIgnoreItems)
	}
	ig := &Ignore{}
	for _, item := range items {
		item = strings.TrimSpace(item)
		kind, value, ok := strings.Cut(item, ":")
		if !ok {
			return nil, errorf("item %q is not kind:value (cidr:, path: or ua:)", item)
		}
		value = strings.TrimSpace(value)
		if value == "" || len(value) > MaxIgnoreItemBytes {
			return nil, errorf("item %q: a value of 1 to %d bytes", item, MaxIgnoreItemBytes)
		}
		switch strings.TrimSpace(kind) {
		case "cidr":
			p, err := parsePrefix(value)
			if err != nil {
				return nil, errorf("item %q: not an address nor a prefix", item)
			}
			ig.cidrs = append(ig.cidrs, p)
		case "path":
			if value[0] != '/' {
				return nil, errorf("item %q: a path begins with /", item)
			}
			if len(value) > 1 {
				value = strings.TrimSuffix(value, "/")
			}
			ig.paths = append(ig.paths, value)
		case "ua":
			ig.uas = append(ig.uas, []byte(lowerASCII(value)))
		default:
			return nil, errorf("item %q: kind is cidr, path or ua", item)
		}
	}
	return ig, nil
}

// parsePrefix reads an address (a prefix of its full length) or a prefix,
// masked.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, errorf("an IPv4-mapped prefix")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// NeedsClient reports whether Match looks at the client's address: the
// caller reads it only then.
func (ig *Ignore) NeedsClient() bool { return ig != nil && len(ig.cidrs) > 0 }

// Match reports whether a request from client (invalid: unknown), for
// path, with the User-Agent ua, is one the instance ignores. It costs a
// comparison per cidr: and path: item, and a linear search of at most
// IgnoreUABytes of ua per `ua:` item; no allocation.
func (ig *Ignore) Match(client netip.Addr, path, ua string) bool {
	if ig == nil {
		return false
	}
	if client.IsValid() {
		client = client.Unmap().WithZone("")
		for _, p := range ig.cidrs {
			if p.Contains(client) {
				return true
			}
		}
	}
	for _, p := range ig.paths {
		if p == "/" || path == p || strings.HasPrefix(path, p) && path[len(p)] == '/' {
			return true
		}
	}
	if len(ig.uas) == 0 {
		return false
	}
	// The User-Agent is an outsider's: lowered once, then each item found
	// by bytes.Contains (linear search, not a comparison per offset and
	// byte: 7 items of 128 bytes against a crafted agent cost 0.2-0.8 ms a
	// call that way, and a route calls it per instance per request).
	var low [IgnoreUABytes]byte
	n := copy(low[:], ua)
	for i, c := range low[:n] {
		if 'A' <= c && c <= 'Z' {
			low[i] = c + 'a' - 'A'
		}
	}
	for _, u := range ig.uas {
		if bytes.Contains(low[:n], u) {
			return true
		}
	}
	return false
}

// activityError is what is wrong with a caddy.standby_ignore value.
type activityError string

func (e activityError) Error() string { return string(e) }

func errorf(format string, args ...any) error {
	return activityError(fmt.Sprintf(format, args...))
}

// parseActivity reads an instance's caddy.standby_cpu and
// caddy.standby_ignore; bad names the first of them whose value is not
// valid ("" if none), which then counts as absent.
func parseActivity(labels map[string]string) (cpu float64, ignore *Ignore, bad string) {
	cpu, badCPU := parseStandbyCPU(labels)
	if badCPU {
		bad = LabelStandbyCPU
	}
	if raw, ok := labels[LabelStandbyIgnore]; ok {
		ig, err := ParseIgnore(raw)
		if err != nil {
			if bad == "" {
				bad = LabelStandbyIgnore
			}
		} else {
			ignore = ig
		}
	}
	return cpu, ignore, bad
}

// warnActivity warns once per change of the label that e's
// caddy.standby_cpu or caddy.standby_ignore is not valid (old: the entry e
// replaces, nil: none).
func (c *Catalog) warnActivity(old, e *entry) {
	bad := e.note().badActivity
	if bad == "" || old != nil && old.inst.Labels[bad] == e.inst.Labels[bad] {
		return
	}
	why := "a number of percent of one core above 0 and at most " + strconv.Itoa(MaxStandbyCPU) + ", e.g. 50"
	if bad == LabelStandbyIgnore {
		_, err := ParseIgnore(e.inst.Labels[bad])
		why = "comma-separated cidr:, path: or ua: items, at most " + strconv.Itoa(MaxIgnoreItems) +
			" in " + strconv.Itoa(MaxIgnoreBytes) + " bytes"
		if err != nil {
			why += ": " + ClipLabel(err.Error())
		}
	}
	c.logger.Warn("label "+bad+" is not valid and is ignored ("+why+")",
		zap.String("instance", e.inst.Name), zap.String(bad, ClipLabel(e.inst.Labels[bad])))
}

// StandbyIgnore is the caddy.standby_ignore of the instance a request for
// host on route would wake (R5's order: one on its way up, else the first
// on standby), and whether that one is on its way up already; nil when
// there is none or it has no such label. No allocation.
func (s *Snapshot) StandbyIgnore(route Route, host string) (ig *Ignore, waking bool) {
	candidates, exact := s.candidates(route, host, false)
	for _, e := range candidates {
		if e.maint || !e.servesHost(host, exact) {
			continue
		}
		if e.wakingUp() || e.awaitingVerdict() {
			return e.ignore, true
		}
	}
	for _, e := range candidates {
		if e.maint || !e.servesHost(host, exact) {
			continue
		}
		if e.sleeping() || e.inst.WakeOnConnect && e.inst.State == StateStandby {
			return e.ignore, false
		}
	}
	return nil, false
}
