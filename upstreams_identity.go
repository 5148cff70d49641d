package caddydicer

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
)

// Who served a request (R13a, R13b). Caddy knows only the address it
// dialled, and Docker reuses addresses, so the answer is bound to this
// request: each GetUpstreams call records what it returned (the targets
// of one catalog snapshot, by instance name and dial address), and the
// upstream reverse_proxy then selected ({http.reverse_proxy.upstream.hostport},
// which it sets before it dials) is looked up among them. Nothing else is
// computed unless asked: the {dicer.upstream.*} placeholders read the
// record when a log line or header uses them, and the per-instance metrics
// read it once, after the request's context ended (upstreams_metrics.go).
//
// What this adds to a request is two allocations, the record and the
// placeholders' function in the request's replacer, and two map
// operations on the request's variables; it saves two: the record holds
// the first call's upstreams (up to three), which GetUpstreams would
// allocate otherwise, and it stays within 512 bytes, the size up to which
// Go allocates an object with pointers most cheaply. No goroutine, no hook
// on the request's context: `make bench-base` compares the request path
// with the code before it, and `make load-base` Caddy's CPU per request
// (docs/benchmarks.md).

// sourcePick is what one source's latest GetUpstreams call for the request
// returned, and the snapshot and host it was computed from.
type sourcePick struct {
	src   *upstreamSource
	snap  *catalog.Snapshot
	host  string
	ups   []*reverseproxy.Upstream
	names []string // names[i] is the instance ups[i] goes to
}

// served is one request's record of its picks: one per source of the
// route (several under a `dynamic multi`), the latest call's (a retry
// asks again).
type served struct {
	repl *caddy.Replacer

	mu    sync.Mutex // the request's goroutine, and the count after its context ended (the client may leave early)
	picks []sourcePick
	// inline holds the pick of a route with one source, the default: a
	// `dynamic multi` appends its other sources' beyond it.
	inline [1]sourcePick
	// inst caches the instance the placeholders last looked up (labels,
	// ID); nil when a new pick may have replaced it.
	inst *catalog.Instance
	// first holds the upstreams of the request's first call when they
	// are at most len(first.block), so that the record costs no
	// allocation of its own. ups[0] is set once they are used.
	first struct {
		block [firstUpstreams]reverseproxy.Upstream
		ups   [firstUpstreams]*reverseproxy.Upstream
		names [firstUpstreams]string
	}
}

// firstUpstreams is how many upstreams the record holds inline: three
// keep it at 512 bytes (a test checks it).
const firstUpstreams = 3

// servedVar is the request variable holding the record; {http.vars.*}
// shows it as the name of the instance served.
const servedVar = "dicer.served"

// record returns the request's record of who served it (R13a, R13b),
// made on the request's first call: it registers the placeholders and,
// with the per-instance metrics on, waits among the records of requests
// in flight to be counted when the request ends. A later call (a retry:
// the attempt before it failed) counts that failed attempt. Nil when r
// did not come through Caddy's HTTP server (unit tests).
func (s *upstreamSource) record(r *http.Request) *served {
	ctx := r.Context()
	vars, _ := ctx.Value(caddyhttp.VarsCtxKey).(map[string]any)
	if vars == nil {
		return nil
	}
	if sv, _ := vars[servedVar].(*served); sv != nil {
		sv.attemptFailed()
		return sv
	}
	repl, _ := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return nil
	}
	sv := &served{repl: repl}
	sv.picks = sv.inline[:0]
	repl.Map(sv.replace)
	vars[servedVar] = sv
	if s.countsInstances || s.rollout.counts() {
		instanceSeries.pend(sv, ctx) // R13b; R4f: a rollout's requests are counted
	}
	return sv
}

// buffers returns room for n upstreams and their names: the record's own
// on its first call, nil when that is used or too small.
func (sv *served) buffers(n int) ([]reverseproxy.Upstream, []*reverseproxy.Upstream, []string) {
	if sv == nil || sv.first.ups[0] != nil || n > firstUpstreams {
		return nil, nil, nil
	}
	return sv.first.block[:n:n], sv.first.ups[:n:n], sv.first.names[:n:n]
}

// observe records the upstreams s returned to the request and the
// instances they go to (R13a, R13b), replacing s's earlier pick.
func (sv *served) observe(s *upstreamSource, snap *catalog.Snapshot, host string, ups []*reverseproxy.Upstream, names []string) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.inst = nil // its pick may be replaced
	p := sourcePick{src: s, snap: snap, host: host, ups: ups, names: names}
	for i := range sv.picks {
		if sv.picks[i].src == s {
			sv.picks[i] = p
			return
		}
	}
	sv.picks = append(sv.picks, p)
}

// String is what {http.vars.dicer.served} shows: the instance served.
func (sv *served) String() string {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if p, i := sv.selected(); p != nil {
		return p.names[i]
	}
	return ""
}

// selected returns the pick and index of the upstream reverse_proxy
// selected last, nil if it selected none of ours. sv.mu is held.
func (sv *served) selected() (*sourcePick, int) {
	v, ok := sv.repl.Get("http.reverse_proxy.upstream.hostport")
	hostport, _ := v.(string)
	if !ok || hostport == "" {
		return nil, 0
	}
	for pi := range sv.picks {
		p := &sv.picks[pi]
		for i, u := range p.ups {
			if u.Dial == hostport {
				return p, i
			}
		}
	}
	return nil, 0
}

// replace resolves the {dicer.upstream.*} placeholders: name, id, kind,
// daemon, route and label.<key> of the instance the request went to; ""
// before an upstream was selected, or when it was none of ours (a
// stand-in answering 503). Values a tenant controls are bounded and
// stripped of control characters.
func (sv *served) replace(key string) (any, bool) {
	rest, ok := strings.CutPrefix(key, "dicer.upstream.")
	if !ok {
		return nil, false
	}
	label, isLabel := strings.CutPrefix(rest, "label.")
	switch {
	case isLabel, rest == "name", rest == "id", rest == "kind", rest == "daemon", rest == "route":
	default:
		return nil, false
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	p, i := sv.selected()
	if p == nil {
		return "", true
	}
	switch rest {
	case "name":
		return printable(p.names[i]), true
	case "kind":
		return p.src.conn.Kind(), true
	case "daemon":
		return p.src.conn.Address(), true
	case "route":
		return p.src.observed.route, true
	}
	if sv.inst == nil || sv.inst.Name != p.names[i] {
		inst, _ := p.snap.Find(p.src.route, p.host, p.names[i])
		sv.inst = &inst
	}
	if isLabel {
		return printable(sv.inst.Labels[label]), true
	}
	return printable(sv.inst.ID), true
}

// maxPlaceholderValue bounds a placeholder's value from a label or a name.
const maxPlaceholderValue = 256

// printable is s bounded to maxPlaceholderValue bytes, each control
// character (a CR or LF would split a header or a plain log line) as "?".
func printable(s string) string {
	if len(s) > maxPlaceholderValue {
		s = s[:maxPlaceholderValue]
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = '?'
		}
	}
	return string(b)
}

// attemptFailed counts the attempt before a retry against the instance it
// went to: reverse_proxy asks its upstream source again only after an
// attempt failed (a dial error, or a response its retry_match retries).
func (sv *served) attemptFailed() {
	sv.mu.Lock()
	p, i := sv.selected()
	var st *instanceStats
	if p != nil && p.src.observed.conn != nil { // nil: not provisioned (unit tests)
		st = p.src.observed.stats(p.names[i])
		st.learnHost(p.ups[i].Host)
	}
	sv.mu.Unlock()
	if st != nil {
		st.record(0, 0)
	}
}

// done counts the request's last attempt against the instance it went
// to, once the request's context ended (R13b): its status from the
// upstream (none: a dial or transport error), and its latency to the
// response's headers.
func (sv *served) done() {
	sv.mu.Lock()
	p, i := sv.selected()
	var st *instanceStats
	var rc *rollout.Counters
	if p != nil && p.src.observed.conn != nil { // nil: not provisioned (unit tests)
		if p.src.countsInstances {
			st = p.src.observed.stats(p.names[i])
			st.learnHost(p.ups[i].Host)
		}
		if rr := p.src.rollout; rr.counts() { // R4f
			rc = rr.counter(p.names[i])
		}
	}
	sv.mu.Unlock()
	if st == nil && rc == nil {
		return
	}
	status, _ := sv.repl.Get("http.reverse_proxy.status_code")
	code, _ := status.(int)
	latency, _ := sv.repl.Get("http.reverse_proxy.upstream.latency")
	d, _ := latency.(time.Duration)
	if st != nil {
		st.record(code, d)
	}
	if rc != nil && (code != 0 || sv.failedUpstream()) {
		rc.Record(code, d)
	}
}

// failedUpstream reports whether a request without an answer failed
// upstream (a refused or reset connection, a timeout: Caddy's server set
// {http.error} before the request's context ended), rather than its
// client hanging up, which reverse_proxy calls no failure of the
// upstream (a 499): a rollout does not count such a request (R4f), or an
// outsider cutting requests could fail a version.
func (sv *served) failedUpstream() bool {
	_, ok := sv.repl.Get("http.error")
	return ok
}
