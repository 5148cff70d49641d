package catalog

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// entry is an Instance with what routing needs worked out once, when the
// instance changes, instead of on every request. Entries are immutable once
// published in a Snapshot. A catalog keeps one per instance, so its fields
// are packed (the words first, the flags together at the end) and what
// is rarely set is behind one pointer (notes): 50,000 instances cost what
// their entries weigh 50,000 times (issue 43).
type entry struct {
	inst Instance
	// hosts are the normalized exact names of the caddy.host label, and
	// wildcards the suffixes of its wildcard patterns ("example.com" for
	// "*.example.com", R2a); restricted is set when the label is there at
	// all, so the instance serves only what it lists (R2); overCap when
	// the label is over the caps (R2c): it then claims nothing, and still
	// restricts.
	hosts     []string
	wildcards []string
	// paths are the normalized prefixes of the caddy.path label (R2d);
	// pathed is set when the label is there at all, so the instance serves
	// only under them; notes.badPath says why the label is not valid: it
	// then claims no prefix, and still restricts.
	paths []string
	// probeDials are where the probe that decides listening tries.
	probeDials []string
	// notes are the reasons and messages few entries have (nil: none).
	notes *entryNotes
	// net is the network a route without a network setting reaches the
	// instance on (R11): the caddy.network label's, else the only one; nil
	// when there is none or the choice is ambiguous.
	net *Attachment
	// activity is set when the standby policy is valid (kept from the
	// entry this one replaces).
	activity *Activity
	// dials remembers the dial address last resolved (dialmemo.go).
	dials *dialMemory
	// asleepSince is when it was last seen go on standby (R5o), in Unix
	// nanoseconds (8 bytes, not a time.Time's 24: P6); 0 while it is not.
	asleepSince int64
	// probeGen names the ProbeRequest that decides listening, and verdict
	// holds its answer (nil: none asked).
	probeGen uint64
	verdict  *probeVerdict
	// seq is the catalog's Seq when the daemon last described the instance;
	// startEvent and stopEvent when an event last said it started, and
	// stopped or is stopping (Sink.Started, Sink.Stopping), in the order
	// the daemon sent them.
	seq, startEvent, stopEvent uint64
	// standby is the caddy.standby_after policy.
	standby Standby
	// pool is the caddy.soft_limit and caddy.depends_on labels (poollabels.go).
	pool poolLabels
	// ignore is its caddy.standby_ignore (R5r, activity.go); nil when
	// absent or bad.
	ignore *Ignore
	// weighting is its weight and session identity (R4c, R4d, weight.go).
	weighting
	// port is the parsed caddy.port label: 0 when absent, -1 when invalid.
	port int32
	// onlyPort is the guest port of the only TCP port the instance publishes,
	// 0 when it publishes none or several (R3).
	onlyPort int32
	// apart is the number of the spelling its dial addresses are written
	// in (see spelling): 0, the address itself, unless another instance
	// had one of its places before (R1d), so that Caddy's health state of
	// that one is not this one's.
	apart      uint32
	restricted bool
	overCap    bool
	pathed     bool
	// strip is the caddy.strip_path label (R2d): stripUnset, stripYes or
	// stripNo.
	strip stripChoice
	// labelled is set when the instance has a caddy.* label: meant for a
	// route or the permission.
	labelled bool
	// ambiguous is set when the instance is on several networks and has no
	// caddy.network label.
	ambiguous bool
	// listening is false while a running instance without a health check
	// has not yet accepted a connection where requests would go (R1a),
	// unless its verdict is in (see isListening).
	listening bool
	// stopping is set from Sink.Stopping until Started or a Put that shows
	// the instance no longer running.
	stopping bool
	// maint is set while the instance is in maintenance (R5i, its label
	// or an operator's switch), with notes.maintMsg its message.
	maint bool
}

// probeVerdict is the answer to an entry's readiness probe (R1a). It is
// shared by the entry and its copies, and MarkReady sets it in place
// instead of publishing a copy of the entry re-indexed under its hosts:
// the verdicts of a catalog's first listing come all at once, 50,000 of
// them for a catalog that size, and a copy each, with the paths of the
// indexes copied for it, was most of what Caddy allocated then, and the
// garbage the collector found live while they came (issue 43). An
// instance goes from held out to in, never back, on the same entry:
// another probe is another entry, with another verdict (startProbe).
type probeVerdict struct {
	state atomic.Uint32 // verdictPending, verdictAccepted or verdictGaveUp
}

// The states of a probeVerdict.
const (
	verdictPending uint32 = iota
	verdictAccepted
	verdictGaveUp
)

// isListening reports whether requests may go to e as far as its
// readiness goes (R1a): it needed no probe, or its verdict is in.
func (e *entry) isListening() bool {
	return e.listening || e.verdict != nil && e.verdict.state.Load() != verdictPending
}

// unverified reports that the prober gave up on e and let it join anyway.
func (e *entry) unverified() bool {
	return e.verdict != nil && e.verdict.state.Load() == verdictGaveUp
}

// entryNotes are the words of an entry that few entries have. They are
// shared by an entry and its copies, so they are never changed once set:
// setNotes gives the entry a changed copy.
type entryNotes struct {
	// badPath says why the caddy.path label is not valid.
	badPath string
	// stopWhy is what the event that made the entry stopping said, if
	// anything.
	stopWhy string
	// badStandby names a standby label with a bad value (R5).
	badStandby string
	// badPool names the pool label whose value is not valid (R5j, R5k).
	badPool string
	// badActivity names caddy.standby_cpu or caddy.standby_ignore when its
	// value is not valid (R5r).
	badActivity string
	// maintMsg is the maintenance message (R5i).
	maintMsg string
}

// noNotes are the notes of an entry that has none.
var noNotes entryNotes

// note returns e's notes, never nil.
func (e *entry) note() *entryNotes {
	if e.notes == nil {
		return &noNotes
	}
	return e.notes
}

// setNotes changes a copy of e's notes with change, and keeps it, or
// none if nothing is left in it.
func (e *entry) setNotes(change func(n *entryNotes)) {
	n := *e.note()
	change(&n)
	if n == noNotes {
		e.notes = nil
		return
	}
	if e.notes != nil && *e.notes == n {
		return
	}
	e.notes = &n
}

// keepEvents carries the event counts of old (nil: none) over to e.
func (e *entry) keepEvents(old *entry) {
	if old != nil {
		e.startEvent, e.stopEvent = old.startEvent, old.stopEvent
	}
}

func newEntry(inst Instance) *entry {
	e := &entry{inst: inst, listening: true, dials: &dialMemory{}}
	e.hosts, e.wildcards, e.restricted, e.overCap = parseHosts(inst.Labels[LabelHost])
	var notes entryNotes
	e.paths, e.pathed, notes.badPath = parsePaths(inst.Labels[LabelPath])
	if e.strip, notes.badPath = parseStrip(inst.Labels, notes.badPath); notes.badPath != "" {
		e.paths, e.pathed = nil, true
	}
	if _, refused := inst.Labels[LabelRefused]; refused { // R2f: no host, no path, on any route
		e.hosts, e.wildcards, e.restricted = nil, nil, true
		e.paths, e.pathed, notes.badPath = nil, true, ""
	}
	for k := range inst.Labels {
		if strings.HasPrefix(k, "caddy.") {
			e.labelled = true
			break
		}
	}
	e.standby, notes.badStandby = parseStandby(inst.Labels)
	e.weighting = newWeighting(&inst)
	e.pool, notes.badPool = parsePool(inst.Labels)
	e.standby.CPU, e.ignore, notes.badActivity = parseActivity(inst.Labels) // R5r
	if e.standby.After == 0 {
		e.standby.CPU = 0 // without standby_after, nothing to keep awake
	}
	if notes != noNotes {
		e.notes = &notes
	}
	if raw, ok := inst.Labels[LabelPort]; ok {
		e.port = int32(parsePort(raw))
	}
	for _, p := range inst.Ports {
		if p.Protocol != TCP {
			continue
		}
		switch e.onlyPort {
		case 0:
			e.onlyPort = int32(p.GuestPort)
		case int32(p.GuestPort):
		default:
			e.onlyPort = -1
		}
	}
	if e.onlyPort < 0 {
		e.onlyPort = 0
	}
	switch label, ok := inst.Labels[LabelNetwork]; {
	case ok:
		e.net = e.attachment(strings.TrimSpace(label))
	case len(inst.Networks) == 1:
		e.net = &e.inst.Networks[0]
	default:
		e.ambiguous = len(inst.Networks) > 1
	}
	return e
}

// frozen reports a state in which the daemon keeps the instance's guest
// frozen: connections to it stay open, and nothing answers them.
func frozen(s State) bool { return s == StateStandby || s == StatePaused }

// keepApart carries the spelling number of old, the entry e replaces
// (nil: none), over to e.
func (e *entry) keepApart(old *entry) {
	if old != nil {
		e.apart = old.apart
	}
}

// froze reports whether e, replacing old (nil: none), shows the instance
// frozen, or stopping, where old did not: the moment the connections kept
// alive to it must be dropped (R5a, see Options.Froze). A stopping
// instance gets no new request, and an app draining on its stop signal
// waits for the connections it has (Go's http.Server.Shutdown, for one,
// waits up to 5 s for a connection that never sent a request).
func (e *entry) froze(old *entry) bool {
	if old == nil {
		return false
	}
	return frozen(e.inst.State) && !frozen(old.inst.State) ||
		e.inst.State == StateStopping && old.inst.State != StateStopping
}

// keepActivity carries the Activity of old, the entry e replaces (nil:
// none), over to e, or starts one, when e has a standby policy.
func (e *entry) keepActivity(old *entry) {
	switch {
	case e.standby.After == 0 && e.pool.softLimit == 0: // R5j counts a pool's requests
	case old != nil && old.activity != nil:
		e.activity = old.activity
	default:
		e.activity = NewActivity()
	}
}

// attachment is the instance's place on the named network, nil if it is not
// on it.
func (e *entry) attachment(network string) *Attachment {
	for i := range e.inst.Networks {
		if e.inst.Networks[i].Network == network {
			return &e.inst.Networks[i]
		}
	}
	return nil
}

// network picks the network a route reaches the instance on (R11): the
// route's network setting, else the default from newEntry.
func (e *entry) network(routeNetwork string) *Attachment {
	if routeNetwork != "" {
		return e.attachment(routeNetwork)
	}
	return e.net
}

// notRoutable says why the instance takes no requests (R1) on a route with
// the given network setting, or "" when it is routable. It builds its
// answer, so only logs and the admin API call it; routable is the request
// path's check.
func (e *entry) notRoutable(routeNetwork string) string {
	switch net := e.network(routeNetwork); {
	case e.maint:
		return "in maintenance: " + ClipLabel(e.note().maintMsg) // R5i
	case e.inst.State == StateStandby:
		return "on standby"
	case e.inst.State != StateRunning:
		return e.inst.State.String()
	case net == nil || net.Address == "":
		return e.noAddress(routeNetwork) // R11, R11h
	case !e.isListening():
		return e.notReady()
	case e.inst.Health == HealthStarting:
		return "health check has no verdict yet"
	case e.inst.Health == HealthUnhealthy:
		return "unhealthy"
	}
	return ""
}

// routable reports whether notRoutable(routeNetwork) is "", without
// building a reason: it runs per candidate on every request.
func (e *entry) routable(routeNetwork string) bool {
	net := e.network(routeNetwork)
	return !e.maint && e.inst.State == StateRunning && net != nil && net.Address != "" && e.isListening() &&
		e.inst.Health != HealthStarting && e.inst.Health != HealthUnhealthy
}

// notReady is why a running instance without a health check is held out
// (R1a): the ports its probe tries have not accepted a connection yet.
func (e *entry) notReady() string {
	var ports []string
	for _, d := range e.probeDials {
		if _, p, err := net.SplitHostPort(d); err == nil && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	switch len(ports) {
	case 0:
		return "not ready: its port refuses"
	case 1:
		return "not ready: port " + ports[0] + " refuses"
	}
	return "not ready: ports " + andList(ports) + " refuse"
}

// noPort says why the instance has no port on a route with the given port
// setting (R3), or "" when it has one.
func (e *entry) noPort(routePort int) string {
	switch {
	case e.port < 0:
		return "caddy.port " + strconv.Quote(e.inst.Labels[LabelPort]) + " is not a port"
	case e.guestPort(routePort) != 0:
		return ""
	}
	var tcp []string
	for _, p := range e.inst.Ports {
		if g := strconv.Itoa(int(p.GuestPort)); p.Protocol == TCP && !slices.Contains(tcp, g) {
			tcp = append(tcp, g)
		}
	}
	if len(tcp) == 0 {
		return "no port: publishes none and the route sets none"
	}
	return "no port: publishes several (" + strings.Join(tcp, ", ") + ") and the route sets none"
}

// why says why the instance gets no requests on route (R1, R3, R4), or ""
// when it gets them; for logs and the admin API.
func (e *entry) why(route Route, at *reach) string {
	if e.inst.State == StateRunning && e.port < 0 {
		return e.noPort(route.Port) // R3: said before any later trouble
	}
	if w := e.notRoutable(route.Network); w != "" {
		return w
	}
	if w := e.noPort(route.Port); w != "" {
		return w
	}
	if e.resolve(route, at).dial == "" {
		return "no address on its network"
	}
	return ""
}

// networkNames are the names of the networks the instance is on.
func (e *entry) networkNames() []string {
	names := make([]string, len(e.inst.Networks))
	for i, n := range e.inst.Networks {
		names[i] = n.Network
	}
	return names
}

// andList joins words as "a", "a and b", "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// awaitingVerdict reports a wakeable instance on its way up: starting, or
// running while its health check has no verdict yet. Most likely it was just
// woken, so requests keep going to it rather than waking another (R5, first
// choice).
func (e *entry) awaitingVerdict() bool {
	if !e.inst.WakeOnConnect {
		return false
	}
	return e.inst.State == StateStarting || e.inst.State == StateRunning && (e.inst.Health == HealthStarting || !e.isListening())
}

// servesHost reports whether the instance may take requests for host (R2):
// an instance with a caddy.host label only serves the hosts it lists,
// exactly or through a wildcard; a wildcard serves only a host that no
// instance lists exactly (R2a), which claimedExactly says.
func (e *entry) servesHost(host string, claimedExactly bool) bool {
	if !e.restricted {
		return true
	}
	if contains(e.hosts, host) {
		return true
	}
	if claimedExactly || len(e.wildcards) == 0 {
		return false
	}
	suffix, ok := WildcardSuffix(host)
	return ok && contains(e.wildcards, suffix)
}

// guestPort picks the port requests go to (R3): caddy.port, else the
// route's port, else the only TCP port published. 0 means none.
func (e *entry) guestPort(routePort int) int {
	switch {
	case e.port < 0:
		return 0
	case e.port > 0:
		return int(e.port)
	case routePort > 0:
		return routePort
	}
	return int(e.onlyPort)
}

// endpoint is where requests for this instance go (R4), and whether that is
// a published port (a connection to which wakes a standby instance).
type endpoint struct {
	dial      string
	published bool
}

// resolve applies R3, R4 and the network rule of R11 for a route. An empty
// dial means the instance gets no requests.
func (e *entry) resolve(route Route, at *reach) endpoint {
	if ep, ok := e.dials.recall(route, at, e.apart); ok {
		return ep
	}
	var ep endpoint
	if host, port, published := e.place(route, at); host != "" {
		ep = endpoint{dial: joinHostPort(spelling(host, e.apart), port), published: published}
	}
	e.dials.keep(route, at, e.apart, ep)
	return ep
}

// place is where resolve sends requests, before the host is spelt and
// joined with the port: no allocation. An empty host means none.
func (e *entry) place(route Route, at *reach) (host string, port int, published bool) {
	port = e.guestPort(route.Port)
	if port == 0 {
		return "", 0, false
	}
	var net Attachment
	if n := e.network(route.Network); n != nil {
		net = *n
	}
	for _, p := range e.inst.Ports {
		if p.Protocol != TCP || int(p.GuestPort) != port || p.HostPort == 0 {
			continue
		}
		if host := at.publishedHost(p.HostIP, net.Gateway); host != "" {
			return host, int(p.HostPort), true
		}
	}
	return net.Address, port, false
}

// reach holds the daemon-wide facts R4 uses to reach a published port.
type reach struct {
	// publishedPortHost is the published_port_host setting.
	publishedPortHost string
	// daemonHost is the daemon address's host when that is TCP and not
	// loopback.
	daemonHost string
}

// publishedHost is the host at which a port published on hostIP is reached
// (R4), or "" when it cannot be used: a loopback-only port is never
// forwarded by the daemon, so requests go to the instance itself.
func (r *reach) publishedHost(hostIP, gateway string) string {
	if hostIP != "" {
		ip := net.ParseIP(hostIP)
		switch {
		case ip == nil:
			return hostIP
		case ip.IsLoopback():
			return ""
		case !ip.IsUnspecified():
			return hostIP
		}
	}
	switch {
	case r.publishedPortHost != "":
		return r.publishedPortHost
	case r.daemonHost != "":
		return r.daemonHost
	}
	return gateway
}

// joinHostPort is net.JoinHostPort for an int port, in one allocation.
func joinHostPort(host string, port int) string {
	b := make([]byte, 0, len(host)+8)
	if strings.IndexByte(host, ':') >= 0 {
		b = append(append(append(b, '['), host...), ']')
	} else {
		b = append(b, host...)
	}
	b = strconv.AppendInt(append(b, ':'), int64(port), 10)
	return unsafeString(b)
}

// parsePort parses a caddy.port label: 1..65535, else -1.
func parsePort(raw string) int {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n < 1 || n > 65535 {
		return -1
	}
	return n
}

// The caps on what one caddy.host label may claim (R2c): a label with more
// names, or more bytes, claims no host at all. They bound the work an
// update of the instance costs the catalog (under its lock, for every
// other instance's update too) and the names the permission can be made
// to allow certificates for (R7), whoever labels the instance.
const (
	// MaxHostNames is the most names (exact or wildcard, duplicates
	// counted once) one caddy.host label may list: 100, as many as
	// Let's Encrypt puts in one certificate.
	MaxHostNames = 100
	// MaxHostLabelBytes is the longest caddy.host label value, in bytes:
	// 8 KiB, 100 names of 80 bytes with their separators.
	MaxHostLabelBytes = 8 << 10
)

// parseHosts splits and normalizes a caddy.host label into its exact names
// and the suffixes of its wildcard patterns (R2a); restricted reports a
// label that is there at all. A name with a `*` anywhere but as a whole
// first label (`a.*.example.com`, `*example.com`, a lone `*`) matches no
// request and is dropped. A label over the caps (R2c) gives no name and
// overCap: it still restricts the instance, to no host. The work is linear
// in the label's length, and stops at the caps.
func parseHosts(raw string) (hosts, wildcards []string, restricted, overCap bool) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil, false, false
	}
	if len(raw) > MaxHostLabelBytes {
		return nil, nil, true, true
	}
	seen := make(map[string]struct{})
	for item := range strings.SplitSeq(raw, ",") {
		h := NormalizeName(strings.TrimSpace(item))
		if _, dup := seen[h]; dup || h == "" {
			continue
		}
		if seen[h] = struct{}{}; len(seen) > MaxHostNames {
			return nil, nil, true, true
		}
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if validSuffix(suffix) {
				wildcards = append(wildcards, suffix)
			}
			continue
		}
		if strings.IndexByte(h, '*') < 0 {
			hosts = append(hosts, h)
		}
	}
	return hosts, wildcards, true, false
}

// ClipLabel is a label value for a log line or the admin API: at most
// maxLoggedLabel bytes of it (never half a character), then how long it
// is: a tenant's label costs a log line no more than that.
func ClipLabel(label string) string {
	if len(label) <= maxLoggedLabel {
		return label
	}
	return strings.ToValidUTF8(label[:maxLoggedLabel], "") + "... (" + strconv.Itoa(len(label)) + " bytes)"
}

// validSuffix reports a wildcard pattern's suffix that a host can match:
// labels that are not empty and hold no `*`.
func validSuffix(s string) bool {
	return s != "" && s[0] != '.' && s[len(s)-1] != '.' &&
		!strings.Contains(s, "..") && strings.IndexByte(s, '*') < 0
}

// WildcardSuffix is what a wildcard pattern must have after its `*.` to
// match host (R2a): host without its first label, which must be neither
// empty nor hold a `*`; ok is false for a host of one label.
// "a.example.com" gives "example.com", so `*.example.com` matches it.
func WildcardSuffix(host string) (suffix string, ok bool) {
	i := strings.IndexByte(host, '.')
	if i <= 0 || i == len(host)-1 || strings.IndexByte(host[:i], '*') >= 0 {
		return "", false
	}
	return host[i+1:], true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// NormalizeHost turns a request's Host (or a TLS server name) into the form
// caddy.host names are indexed by, exactly as Caddy's host matcher reads a
// request's Host before it compares it with a site address (R2b): without
// a port (net.SplitHostPort's rules; a bracketed IPv6 literal loses its
// brackets, and so does a host without a port), ASCII letters in lower
// case, and nothing else changed: a trailing dot stays, so that
// "internal.example.com." is no more served than Caddy's site
// internal.example.com matches it. It does not allocate for a name already
// in that form. Label entries go through NormalizeName instead.
func NormalizeHost(host string) string {
	if h, ok := splitHost(host); ok {
		host = h
	} else {
		host = strings.TrimPrefix(host, "[")
		host = strings.TrimSuffix(host, "]")
	}
	return lowerASCII(host)
}

// splitHost is the host net.SplitHostPort returns, and whether it returns
// one rather than an error, without the error's allocation.
func splitHost(hostport string) (string, bool) {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return "", false // missing port
	}
	var host string
	j, k := 0, 0
	if hostport[0] == '[' {
		end := strings.IndexByte(hostport, ']')
		if end < 0 || end+1 != i {
			return "", false // missing ']', missing port or too many colons
		}
		host = hostport[1:end]
		j, k = 1, end+1
	} else {
		host = hostport[:i]
		if strings.IndexByte(host, ':') >= 0 {
			return "", false // too many colons
		}
	}
	if strings.IndexByte(hostport[j:], '[') >= 0 || strings.IndexByte(hostport[k:], ']') >= 0 {
		return "", false // unexpected '[' or ']'
	}
	return host, true
}

// NormalizeName turns an entry of a caddy.host label (or a domain of the
// operator's configuration, such as allow_suffix) into the form names are
// indexed by: ASCII letters in lower case, without a port, the brackets of
// an IPv6 literal or trailing dots (R2b: a trailing dot is ignorable in
// labels only). It is idempotent.
func NormalizeName(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		// An IPv6 literal has two colons or more, so that what is left of a
		// bracketed one is not taken for host:port when normalised again.
		if j := strings.IndexByte(host, ']'); strings.HasPrefix(host, "[") && j > 0 && strings.Count(host[:j], ":") >= 2 {
			host = host[1:j]
		} else if strings.IndexByte(host[:i], ':') < 0 {
			host = host[:i] // host:port; a bare IPv6 literal has more colons
		}
	}
	return lowerASCII(strings.TrimRight(host, ".")) // every trailing dot, so that "a.." normalises in one go
}

// UnderscoreLabel reports whether a label of host, a normalized name,
// starts with '_': an underscored name (RFC 8552) such as
// `_acme-challenge.example.com`, where DNS keeps what speaks for a domain
// (its ACME DNS-01 challenges, DKIM keys, SRV records, the owner TXT of
// dns_records). No such name gets a certificate or a DNS record (R7,
// R7e), whatever a label claims. No allocation.
func UnderscoreLabel(host string) bool {
	return strings.HasPrefix(host, "_") || strings.Contains(host, "._")
}

// lowerASCII is host with its ASCII letters in lower case; host itself,
// without allocating, when it has none in upper case.
func lowerASCII(host string) string {
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 'A' && c <= 'Z' {
			return asciiLower(host, i)
		}
	}
	return host
}

// asciiLower lower-cases the ASCII letters of s from index i on. Host names
// are case-insensitive in ASCII only (RFC 4343); strings.ToLower would also
// change other letters and invalid UTF-8, but only when an ASCII upper case
// letter is present, so that "aÄ" and "AÄ" normalised differently.
func asciiLower(s string, i int) string {
	b := []byte(s)
	for ; i < len(b); i++ {
		if c := b[i]; c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// unsafeString turns a byte slice that is never written again into a string
// without copying it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
