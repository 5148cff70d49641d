package diceradmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// The admin API's pages and switches, beside admin.go's JSON:
//
//	GET  /dicer/dashboard     a read-only page: daemons, routes and their targets, rollouts (R4f), instances and their verdicts, live (R13d)
//	GET  /dicer/routes        each route and its targets now, per host its instances claim
//	GET  /dicer/maintenance   the selectors in maintenance, per daemon (R5i)
//	POST /dicer/maintenance   {"selector": S, "on": true|false, "message": M}: puts the instances S matches in maintenance, on every daemon

// moreRoutes are the admin routes of this file.
func (a adminDicer) moreRoutes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/dicer/dashboard", Handler: caddy.AdminHandlerFunc(getOnly(a.dashboard))},
		{Pattern: "/dicer/routes", Handler: caddy.AdminHandlerFunc(getOnly(a.routesNow))},
		{Pattern: "/dicer/maintenance", Handler: caddy.AdminHandlerFunc(a.maintenance)},
	}
}

// dashboard serves the page (ServeDashboard).
func (adminDicer) dashboard(w http.ResponseWriter, _ *http.Request) error {
	return ServeDashboard(w)
}

// maxRouteHosts bounds the hosts GET /dicer/routes lists per route.
const maxRouteHosts = 100

// anyHost is the host a selector route's row for any other host is
// computed with: a name nobody can claim (.invalid, RFC 2606).
const anyHost = "any-host.dicer.invalid"

func (adminDicer) routesNow(w http.ResponseWriter, _ *http.Request) error {
	out := []RouteTargets{}
	for _, c := range dicerapp.Connections() {
		snap := c.Catalog().Snapshot()
		for _, nr := range c.Routes() {
			route := nr.Route.CatalogRoute()
			var match func(map[string]string) bool
			if route.View != nil {
				if sel, err := selector.Parse(nr.Route.Selects()); err == nil {
					match = sel.Matches
				}
			}
			hosts := claimedHosts(c.Catalog().Instances(match))
			rt := RouteTargets{Kind: c.Kind(), Daemon: c.Address(), Route: nr.Name, Hosts: []HostTargets{}}
			if len(hosts) > maxRouteHosts {
				rt.MoreHosts, hosts = len(hosts)-maxRouteHosts, hosts[:maxRouteHosts]
			}
			if route.View != nil {
				hosts = append(hosts, "*")
			}
			for _, h := range hosts {
				q := h
				if h == "*" {
					q = anyHost
				}
				ht := HostTargets{Host: h, Targets: []string{}}
				for _, t := range snap.Targets(nil, route, catalog.NormalizeHost(q)) {
					ht.Targets = append(ht.Targets, t.Instance+" "+t.Dial)
				}
				rt.Hosts = append(rt.Hosts, ht)
			}
			out = append(out, rt)
		}
	}
	return writeJSON(w, out)
}

// claimedHosts are the distinct names the caddy.host labels of list
// claim, sorted.
func claimedHosts(list []catalog.InstanceStatus) []string {
	seen := map[string]bool{}
	for _, st := range list {
		for _, h := range strings.Split(st.Labels[catalog.LabelHost], ",") {
			if h = strings.TrimSpace(h); h != "" && len(h) <= 253 {
				seen[h] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// maxMaintenanceBody bounds a POST's body.
const maxMaintenanceBody = 4096

func (adminDicer) maintenance(w http.ResponseWriter, r *http.Request) error {
	switch r.Method {
	case http.MethodGet:
		out := []MaintenanceStatus{}
		for _, c := range dicerapp.Connections() {
			out = append(out, MaintenanceStatus{Kind: c.Kind(), Daemon: c.Address(), Switches: maintenanceSwitches(c)})
		}
		return writeJSON(w, out)
	case http.MethodPost:
	default:
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use GET or POST", r.Method)}
	}
	var req MaintenanceRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxMaintenanceBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("body: %w", err)}
	}
	if strings.TrimSpace(req.Selector) == "" {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errors.New(`selector: missing, e.g. {"selector": "app=shop", "on": true}`)}
	}
	sel, err := selector.Parse(req.Selector)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	out := []MaintenanceStatus{}
	for _, c := range dicerapp.Connections() {
		n, ok, err := c.SetMaintenance(sel, req.Message, req.On) // in a fleet, for every Caddy of it (R4e)
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("%s %s: %w", c.Kind(), c.Address(), err)}
		}
		if !ok {
			return caddy.APIError{HTTPStatus: http.StatusConflict,
				Err: fmt.Errorf("%s %s: %d selectors are in maintenance already", c.Kind(), c.Address(), catalog.MaxMaintenanceSelectors)}
		}
		out = append(out, MaintenanceStatus{Kind: c.Kind(), Daemon: c.Address(), Switches: maintenanceSwitches(c), Changed: n})
	}
	return writeJSON(w, out)
}
