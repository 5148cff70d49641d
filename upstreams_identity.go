package caddydicer

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/pick"
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
// placeholders' function in the request's replacer, and saves two: the
// record holds the first call's upstreams (up to four), which GetUpstreams
// would allocate otherwise. No goroutine, no hook on the request's
// context: `make bench-base` compares the request path with the code
// before it.

// sourcePick is what one source's latest GetUpstreams call for the request
// returned, and the snapshot and host it was computed from.
type sourcePick struct {
	src   *upstreamSource
	snap  *catalog.Snapshot
	host  string
	block []pick.Upstream
}

// served is one request's record of its picks: one per source of the
// route (several under a `dynamic multi`), the latest call's (a retry
// asks again).
type served struct {
	repl *caddy.Replacer
	ctx  context.Context // the request's: when it ends, the record is counted (R13b)
	next *served         // the next record waiting to be counted (instanceCollector.pending)

	mu    sync.Mutex // the request's goroutine, and the count after its context ended (the client may leave early)
	picks []sourcePick
	// inline holds the pick of a route with one source, the default: a
	// `dynamic multi` appends its other sources' beyond it.
	inline [1]sourcePick
	// found caches the last lookup of the selected upstream: the pick and
	// index of its dial address.
	found struct {
		p    *sourcePick
		i    int
		inst *catalog.Instance
	}
	// first holds the upstreams of the request's first call when they
	// are at most len(first.block), so that the record costs no
	// allocation of its own.
	first struct {
		used  bool
		block [4]pick.Upstream
		ups   [4]*reverseproxy.Upstream
	}
}

// servedVar is the request variable holding the record; {http.vars.*}
// shows it as the name of the instance served.
const servedVar = "dicer.served"

// record returns the request's record of who served it (R13a, R13b),
// made on the request's first call: it registers the placeholders and
// waits, among the records of requests in flight, to be counted when the
// request ends. A later call (a retry: the attempt before it failed)
// counts that failed attempt. Nil when r did not come through Caddy's
// HTTP server (unit tests).
func (s *upstreamSource) record(r *http.Request) *served {
	ctx := r.Context()
	sv, _ := caddyhttp.GetVar(ctx, servedVar).(*served)
	if sv != nil {
		sv.attemptFailed()
		return sv
	}
	repl, _ := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return nil
	}
	sv = &served{repl: repl, ctx: ctx}
	sv.picks = sv.inline[:0]
	repl.Map(sv.replace)
	caddyhttp.SetVar(ctx, servedVar, sv)
	if s.countsInstances {
		instanceSeries.pend(sv) // R13b
	}
	return sv
}

// buffers returns room for n upstreams: the record's own on its first
// call, nil when that is used or too small.
func (sv *served) buffers(n int) ([]pick.Upstream, []*reverseproxy.Upstream) {
	if sv == nil || sv.first.used || n > len(sv.first.block) {
		return nil, nil
	}
	sv.first.used = true
	return sv.first.block[:n:n], sv.first.ups[:n:n]
}

// observe records the upstreams s returned to the request (R13a, R13b),
// replacing s's earlier pick.
func (sv *served) observe(s *upstreamSource, snap *catalog.Snapshot, host string, block []pick.Upstream) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.found.p = nil // its pick may be replaced
	for i := range sv.picks {
		if sv.picks[i].src == s {
			sv.picks[i] = sourcePick{src: s, snap: snap, host: host, block: block}
			return
		}
	}
	sv.picks = append(sv.picks, sourcePick{src: s, snap: snap, host: host, block: block})
}

// String is what {http.vars.dicer.served} shows: the instance served.
func (sv *served) String() string {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if p, i := sv.selected(); p != nil {
		return p.block[i].Name
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
	if sv.found.p != nil && sv.found.i < len(sv.found.p.block) && sv.found.p.block[sv.found.i].Dial == hostport {
		return sv.found.p, sv.found.i
	}
	for pi := range sv.picks {
		p := &sv.picks[pi]
		for i := range p.block {
			if p.block[i].Dial == hostport {
				sv.found.p, sv.found.i, sv.found.inst = p, i, nil
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
		return printable(p.block[i].Name), true
	case "kind":
		return p.src.conn.Kind(), true
	case "daemon":
		return p.src.conn.Address(), true
	case "route":
		return p.src.observed.route, true
	}
	if sv.found.inst == nil {
		inst, _ := p.snap.Find(p.src.route, p.host, p.block[i].Name)
		sv.found.inst = &inst
	}
	if isLabel {
		return printable(sv.found.inst.Labels[label]), true
	}
	return printable(sv.found.inst.ID), true
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
		st = p.src.observed.stats(p.block[i].Name)
		st.learnHost(p.block[i].Host)
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
	if p != nil && p.src.observed.conn != nil { // nil: not provisioned (unit tests)
		st = p.src.observed.stats(p.block[i].Name)
		st.learnHost(p.block[i].Host)
	}
	sv.mu.Unlock()
	if st == nil {
		return
	}
	status, _ := sv.repl.Get("http.reverse_proxy.status_code")
	code, _ := status.(int)
	latency, _ := sv.repl.Get("http.reverse_proxy.upstream.latency")
	d, _ := latency.(time.Duration)
	st.record(code, d)
}
