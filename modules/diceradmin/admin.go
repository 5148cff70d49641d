package diceradmin

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
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
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
//	GET /dicer/dns                      each zone of the permissions' dns_records (R7e, admin_dns.go)
//	GET /dicer/removed                  instances removed while on standby (R5o, admin_removed.go)
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
		{Pattern: "/dicer/weight", Handler: caddy.AdminHandlerFunc(a.weight)},            // admin_weight.go
		{Pattern: "/dicer/dns", Handler: caddy.AdminHandlerFunc(getOnly(a.dns))},         // admin_dns.go
		{Pattern: "/dicer/removed", Handler: caddy.AdminHandlerFunc(getOnly(a.removed))}, // admin_removed.go
		{Pattern: "/dicer/rollouts", Handler: caddy.AdminHandlerFunc(a.rollouts)},        // admin_rollouts.go
	}, a.moreRoutes()...) // admin_pages.go
}

func (adminDicer) daemons(w http.ResponseWriter, _ *http.Request) error {
	out := []DaemonStatus{}
	for _, c := range dicerapp.Connections() {
		st := c.Status()
		n := c.Catalog().Counts()
		total := 0
		for _, count := range n.ByState {
			total += count
		}
		d := DaemonStatus{
			Kind: c.Kind(), Address: c.Address(), State: st.State, Since: st.Since,
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
		for _, r := range c.Routes() {
			d.Routes = append(d.Routes, r.Name)
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
	for _, c := range dicerapp.Connections() {
		for _, st := range c.Catalog().Instances(match) {
			out = append(out, withBackoff(c, instanceStatus(c, st)))
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
	for _, c := range dicerapp.Connections() {
		snap := c.Catalog().Snapshot()
		for _, nr := range c.Routes() {
			route := nr.Route.CatalogRoute()
			if path != "" {
				route.Path = path
			}
			e := RouteExplanation{Kind: c.Kind(), Daemon: c.Address(), Route: nr.Name, Targets: []string{},
				Candidates: candidates(snap.Explain(route, host))}
			targets, deferred := nr.Route.Targets(snap, host, path)
			for _, t := range targets {
				e.Targets = append(e.Targets, t.Instance+" "+t.Dial)
			}
			if deferred {
				e.Deferred = true
				setDeferred(&e)
			} else if len(e.Targets) == 0 && c.WakesOnRequest() {
				explainWake(&e, c, snap.WakeCandidates(nil, route, host))
			}
			for i, cand := range e.Candidates {
				if n := fails[cand.Dial]; cand.Target && n > 0 {
					e.Candidates[i].PassiveFails = n
					e.Candidates[i].Why += passiveNote(n)
				}
			}
			out.Routes = append(out.Routes, e)
		}
		for _, p := range c.Permissions() {
			d := CertificateDecision{Kind: c.Kind(), Daemon: c.Address(), Allowed: true, Why: "an instance claims it"}
			if err := p.Decide(host); err != nil {
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
func withBackoff(c *connection.Conn, st InstanceStatus) InstanceStatus {
	after, failures, _ := c.WakeBackoff(st.ID)
	if after.IsZero() {
		return st
	}
	st.NextWake, st.RetryAfter = &after, pages.RetrySeconds(time.Until(after))
	st.Verdict += fmt.Sprintf("; its last %s failed: not woken again before %s (requests get 503 with Retry-After: %d)",
		plural(failures, "wake"), after.UTC().Format(time.RFC3339), st.RetryAfter)
	return st
}

// explainWake says in e what a request does when no instance is routable
// and cands (R5's order) may be woken: what standby.Waker.Hold would do.
func explainWake(e *RouteExplanation, c *connection.Conn, cands []catalog.WakeCandidate) {
	if len(cands) == 0 {
		return
	}
	var soonest time.Time
	for _, wc := range cands {
		after, failures, waking := c.WakeBackoff(wc.ID)
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
	e.RetryAfter = pages.RetrySeconds(time.Until(soonest))
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
