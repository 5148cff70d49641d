// Package diceradmin is the JSON of this plugin's admin API (the routes
// under /dicer/ of Caddy's admin endpoint): what each GET answers and
// each POST takes. The admin module and the `caddy dicer` command share
// it; a program reading the admin API can too.
package diceradmin

import (
	"time"
)

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
	ID     string `json:"id"`
	Name   string `json:"name"`
	// State is the daemon's state word, or standby for a stopped or
	// paused instance Caddy wakes on a request (caddy.standby_after),
	// whose DaemonState then says which.
	State       string            `json:"state"`
	DaemonState string            `json:"daemon_state,omitempty"`
	Health      string            `json:"health"`
	Labels      map[string]string `json:"labels"`
	Networks    []NetworkStatus   `json:"networks"`
	Ports       []PortStatus      `json:"published_ports"`
	// Routable is set when the instance gets requests (R1-R4) on a route
	// without network or port settings, or, for an instance that names no
	// port of its own, on one of the routes' port settings.
	Routable bool `json:"routable"`
	// Verdict is "routable", or why the instance gets no requests:
	// `unhealthy`, `caddy.port "abc" is not a port`, `on networks a and b,
	// none chosen`, `no port: publishes none and the route sets none`,
	// `not ready: port 8080 refuses`, `on standby`, ...
	Verdict string `json:"verdict"`
	// Weight is its share of its rotations under the dicer_weighted and
	// dicer_sticky policies (R4c): its runtime weight while one is set
	// (RuntimeWeight), else its caddy.weight label, else 1.
	Weight        int  `json:"weight"`
	RuntimeWeight bool `json:"runtime_weight,omitempty"`
	// RuntimeWeightFrom is the Caddy of the fleet the runtime weight was
	// set through (its host name and instance ID), when a storage is
	// shared (R4e).
	RuntimeWeightFrom string `json:"runtime_weight_from,omitempty"`
	// LabelTypos are its label keys that look like misspelt known labels
	// (R13c), each with the closest known one.
	LabelTypos []LabelTypo `json:"label_typos,omitempty"`
	// Paths are the path prefixes the instance serves under its hosts
	// (caddy.path, normalized, R2d); none without the label.
	Paths []string `json:"paths,omitempty"`
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
	Candidates []Candidate `json:"candidates"`
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

// RouteTargets is one route, as GET /dicer/routes shows it.
type RouteTargets struct {
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	Route  string `json:"route"`
	// Hosts are, for each host its instances claim (caddy.host, at most
	// maxRouteHosts of them), and on a selector route "*" for any other
	// host, where requests go now.
	Hosts []HostTargets `json:"hosts"`
	// MoreHosts is the number of hosts left out.
	MoreHosts int `json:"more_hosts,omitempty"`
}

// HostTargets are a route's targets for one host: "instance dial" each,
// in order; none means 503 (or a wake, or the maintenance page).
type HostTargets struct {
	Host    string   `json:"host"`
	Targets []string `json:"targets"`
}

// MaintenanceRequest is the body of POST /dicer/maintenance.
type MaintenanceRequest struct {
	// Selector chooses the instances, as a route's selector does.
	Selector string `json:"selector"`
	// On puts them in maintenance; false takes the switch off.
	On bool `json:"on"`
	// Message is shown on the maintenance page (default: "This site is
	// down for maintenance."); at most 512 bytes are kept.
	Message string `json:"message,omitempty"`
}

// MaintenanceStatus is one daemon's switches, as GET /dicer/maintenance
// shows them, or what POST changed there.
type MaintenanceStatus struct {
	Kind     string              `json:"kind"`
	Daemon   string              `json:"daemon"`
	Switches []MaintenanceSwitch `json:"switches"`
	// Changed is, after a POST, how many instances went in or out.
	Changed int `json:"changed"`
}

// WeightRequest is the body of POST /dicer/weight: which instances, and
// the runtime weight to give them or clear (R4c). Exactly one of Weight
// and Clear.
type WeightRequest struct {
	// Selector chooses the instances by label, as a route's selector.
	Selector string `json:"selector,omitempty"`
	// Instance chooses the instances of that name (one per daemon at
	// most); with Selector, an instance must match both.
	Instance string `json:"instance,omitempty"`
	// Weight is the weight, 0 to 10000; 0 makes them warm spares.
	Weight *int `json:"weight,omitempty"`
	// Clear drops their runtime weight: their caddy.weight label (or 1)
	// counts again.
	Clear bool `json:"clear,omitempty"`
}

// WeightChange is one instance POST /dicer/weight changed.
type WeightChange struct {
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	ID     string `json:"id"`
	Name   string `json:"name"`
	// Weight is the weight the instance has now, runtime or label.
	Weight int `json:"weight"`
	// Runtime is set while a runtime weight is in force.
	Runtime bool `json:"runtime"`
	// Gone is set for a weight a clear removed from a fleet's record whose
	// instance the daemon no longer has (R4e); Weight is then 0.
	Gone bool `json:"gone,omitempty"`
}
