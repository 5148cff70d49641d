package caddydicer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

func init() {
	caddy.RegisterModule(adminDicer{})
}

// adminDicer serves the daemons followed, their instances and why each
// gets requests or not, at Caddy's admin endpoint, as reverse_proxy serves
// /reverse_proxy/upstreams:
//
//	GET /dicer/daemons                  each connection: kind, address, state, instances
//	GET /dicer/instances[?selector=S]   each instance and its verdict
//	GET /dicer/explain?host=H           each route: where a request for H goes, and why not elsewhere
//	POST /dicer/weight                  set or clear instances' runtime weights (R4c, admin_weight.go)
//	GET /dicer/explain?host=H[&path=P]  each route: where a request for H (and path P) goes, and why not elsewhere
//
// It reads the shared connections at request time and keeps nothing: an
// admin module is provisioned at every config load and never cleaned up.
// No answer holds a token.
type adminDicer struct{}

// CaddyModule returns the Caddy module information.
func (adminDicer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.dicer",
		New: func() caddy.Module { return new(adminDicer) },
	}
}

// Routes implements caddy.AdminRouter.
func (a adminDicer) Routes() []caddy.AdminRoute {
	return append([]caddy.AdminRoute{
		{Pattern: "/dicer/daemons", Handler: caddy.AdminHandlerFunc(getOnly(a.daemons))},
		{Pattern: "/dicer/instances", Handler: caddy.AdminHandlerFunc(getOnly(a.instances))},
		{Pattern: "/dicer/explain", Handler: caddy.AdminHandlerFunc(getOnly(a.explain))},
		{Pattern: "/dicer/weight", Handler: caddy.AdminHandlerFunc(a.weight)}, // admin_weight.go
	}, a.moreRoutes()...) // admin_pages.go
}

// DaemonStatus is one followed daemon, as GET /dicer/daemons shows it.
type DaemonStatus struct {
	Kind    string `json:"kind"`
	Address string `json:"address"`
	// State is connecting (never listed yet), following, or reconnecting
	// (the last known instances are still routed to), since Since.
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// LastError is why the last session ended, if one did.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	Instances   int        `json:"instances"`
	Routable    int        `json:"routable"`
	Relists     int        `json:"relists"`
	// LastRelistCause is why the session before the last re-listing
	// ended: lost, fell_behind, stalled, unreachable or refused.
	LastRelistCause string     `json:"last_relist_cause,omitempty"`
	LastEvent       *time.Time `json:"last_event,omitempty"`
	// Routes are the names of the routes on this daemon.
	Routes []string `json:"routes"`
	// Version is what the daemon said of itself at the last connect
	// ("Docker Engine 28.5.2 (API 1.51)", "dicerd 0.9.1"; R9a), and
	// VersionWarnings what will not work with it.
	Version         string   `json:"version,omitempty"`
	VersionWarnings []string `json:"version_warnings,omitempty"`
}

// InstanceStatus is one instance, as GET /dicer/instances shows it.
type InstanceStatus struct {
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	catalog.InstanceStatus
	// NextWake is set while the instance's last wakes failed (scale to
	// zero): it is not woken again before then, and requests for it get
	// 503 with RetryAfter (seconds) meanwhile.
	NextWake   *time.Time `json:"next_wake,omitempty"`
	RetryAfter int        `json:"retry_after,omitempty"`
}

// RouteExplanation is one route, as GET /dicer/explain shows it.
type RouteExplanation struct {
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	Route  string `json:"route"`
	// Targets are where a request for the host goes now, in order; none
	// means 503.
	Targets []string `json:"targets"`
	// Candidates are the instances the route considered, each with why
	// it is a target or not.
	Candidates []catalog.Candidate `json:"candidates"`
	// Wake says, when there is no target, what a request does instead
	// on a daemon Caddy wakes instances of (scale to zero): "wakes <name>",
	// "waits for <name>, being woken", or "503 with Retry-After: <n>"
	// while every candidate's last wake failed.
	Wake       string `json:"wake,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
	// Deferred says the route is a source of a `dynamic multi` whose
	// other sources serve the host now (R5b): it answers with no
	// upstream, and its own instances on standby stay asleep.
	Deferred bool `json:"deferred,omitempty"`
}

// Explanation is the answer of GET /dicer/explain.
type Explanation struct {
	Host string `json:"host"`
	// Path is the request path explained, cleaned (R2d); "" for none.
	Path   string             `json:"path,omitempty"`
	Routes []RouteExplanation `json:"routes"`
	// Certificates are the on-demand TLS permissions' decisions for the
	// host (R7).
	Certificates []CertificateDecision `json:"certificates"`
}

// CertificateDecision is one permission's decision for a host.
type CertificateDecision struct {
	Kind    string `json:"kind"`
	Daemon  string `json:"daemon"`
	Allowed bool   `json:"allowed"`
	Why     string `json:"why"`
}

func (adminDicer) daemons(w http.ResponseWriter, _ *http.Request) error {
	out := []DaemonStatus{}
	for _, c := range openConnections() {
		st := c.status.snapshot()
		n := c.catalog.Counts()
		total := 0
		for _, count := range n.ByState {
			total += count
		}
		d := DaemonStatus{
			Kind: c.kind, Address: c.address, State: st.State, Since: st.Since,
			LastError: st.LastError, Instances: total, Routable: n.Routable, Relists: st.Relists,
			LastRelistCause: st.RelistCause,
			Routes:          []string{},
			VersionWarnings: st.VersionWarnings,
		}
		if !st.Version.Zero() {
			d.Version = st.Version.String()
		}
		if !st.LastErrorAt.IsZero() {
			d.LastErrorAt = &st.LastErrorAt
		}
		if !st.LastEvent.IsZero() {
			d.LastEvent = &st.LastEvent
		}
		for _, r := range c.routes.list() {
			d.Routes = append(d.Routes, r.name)
		}
		out = append(out, d)
	}
	return writeJSON(w, out)
}

func (adminDicer) instances(w http.ResponseWriter, r *http.Request) error {
	var match func(map[string]string) bool
	if raw := r.URL.Query().Get("selector"); raw != "" {
		sel, err := selector.Parse(raw)
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
		}
		match = sel.Matches
	}
	out := []InstanceStatus{}
	for _, c := range openConnections() {
		for _, st := range c.catalog.Instances(match) {
			out = append(out, withBackoff(c.standby, InstanceStatus{Kind: c.kind, Daemon: c.address, InstanceStatus: st}))
		}
	}
	return writeJSON(w, out)
}

func (adminDicer) explain(w http.ResponseWriter, r *http.Request) error {
	raw := r.URL.Query().Get("host")
	if raw == "" {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errors.New("host: missing, e.g. /dicer/explain?host=shop.example.com")}
	}
	host := catalog.NormalizeHost(raw)
	out := Explanation{Host: host, Routes: []RouteExplanation{}, Certificates: []CertificateDecision{}}
	path := ""
	if raw := r.URL.Query().Get("path"); raw != "" {
		path = catalog.RequestPath(raw) // R2d
		out.Path = path
	}
	fails := passiveFails()
	for _, c := range openConnections() {
		snap := c.catalog.Snapshot()
		for _, nr := range c.routes.list() {
			route := nr.source.route
			if path != "" {
				route.Path = path
			}
			e := RouteExplanation{Kind: c.kind, Daemon: c.address, Route: nr.name, Targets: []string{},
				Candidates: snap.Explain(route, host)}
			targets, deferred := snap.Targets(nil, route, host), false
			if g := nr.source.group; g != nil {
				targets, _, deferred = g.targets(nr.source, snap, nil, host, path)
			}
			for _, t := range targets {
				e.Targets = append(e.Targets, t.Instance+" "+t.Dial)
			}
			if deferred {
				e.Deferred = true
				setDeferred(&e)
			} else if len(e.Targets) == 0 && c.standby != nil {
				explainWake(&e, c.standby, snap.WakeCandidates(nil, route, host))
			}
			for i, cand := range e.Candidates {
				if n := fails[cand.Dial]; cand.Target && n > 0 {
					e.Candidates[i].PassiveFails = n
					e.Candidates[i].Why += passiveNote(n)
				}
			}
			out.Routes = append(out.Routes, e)
		}
		for _, p := range c.permissions.list() {
			d := CertificateDecision{Kind: c.kind, Daemon: c.address, Allowed: true, Why: "an instance claims it"}
			if err := p.decide(host); err != nil {
				d.Allowed, d.Why = false, denialReason(err)
			}
			if !containsDecision(out.Certificates, d) {
				out.Certificates = append(out.Certificates, d)
			}
		}
	}
	return writeJSON(w, out)
}

// withBackoff adds to st the wake backoff of its instance, if any (w nil:
// a daemon that wakes on connect).
func withBackoff(w *standby.Waker, st InstanceStatus) InstanceStatus {
	if w == nil {
		return st
	}
	after, failures, _ := w.WakeBackoff(st.ID)
	if after.IsZero() {
		return st
	}
	st.NextWake, st.RetryAfter = &after, retrySeconds(time.Until(after))
	st.Verdict += fmt.Sprintf("; its last %s failed: not woken again before %s (requests get 503 with Retry-After: %d)",
		plural(failures, "wake"), after.UTC().Format(time.RFC3339), st.RetryAfter)
	return st
}

// explainWake says in e what a request does when no instance is routable
// and cands (R5's order) may be woken: what standby.Waker.Hold would do.
func explainWake(e *RouteExplanation, w *standby.Waker, cands []catalog.WakeCandidate) {
	if len(cands) == 0 {
		return
	}
	var soonest time.Time
	for _, wc := range cands {
		after, failures, waking := w.WakeBackoff(wc.ID)
		why := ""
		switch {
		case waking:
			e.Wake = "waits for " + wc.Name + ", being woken"
			why = "no instance is routable: being woken, requests wait for it (scale to zero)"
		case after.IsZero():
			e.Wake = "wakes " + wc.Name
			why = "no instance is routable: " + wc.State.String() + ", woken by the requests (scale to zero)"
		default:
			if soonest.IsZero() || after.Before(soonest) {
				soonest = after
			}
			setWhy(e, wc.Name, fmt.Sprintf("on standby; its last %s failed: not woken again before %s",
				plural(failures, "wake"), after.UTC().Format(time.RFC3339)))
			continue
		}
		setWhy(e, wc.Name, why)
		return
	}
	e.RetryAfter = retrySeconds(time.Until(soonest))
	e.Wake = fmt.Sprintf("503 with Retry-After: %d (the last wakes of every instance on standby failed)", e.RetryAfter)
}

// setDeferred says why e's candidates that would be fallbacks on their
// own are not targets: another source of the multi serves (R5b).
func setDeferred(e *RouteExplanation) {
	for i := range e.Candidates {
		if c := &e.Candidates[i]; c.Target {
			c.Target = false
			c.Why = "a fallback on its own, not used: another source of its dynamic multi serves the host (R5b)"
		}
	}
}

// setWhy sets the reason of the named candidate.
func setWhy(e *RouteExplanation, name, why string) {
	for i := range e.Candidates {
		if e.Candidates[i].Instance == name {
			e.Candidates[i].Why = why
		}
	}
}

// retrySeconds is a Retry-After in whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// denialReason is a refusal's reason without the ErrPermissionDenied
// prefix.
func denialReason(err error) string {
	return strings.TrimPrefix(err.Error(), caddytls.ErrPermissionDenied.Error()+": ")
}

func containsDecision(list []CertificateDecision, d CertificateDecision) bool {
	for _, x := range list {
		if x == d {
			return true
		}
	}
	return false
}

// getOnly refuses methods other than GET.
func getOnly(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if r.Method != http.MethodGet {
			return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use GET", r.Method)}
		}
		return h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	}
	return nil
}

// Interface guards
var _ caddy.AdminRouter = (*adminDicer)(nil)
