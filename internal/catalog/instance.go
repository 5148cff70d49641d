// Package catalog is the backend-neutral view of the instances a daemon runs:
// the instance model every adapter translates into, and the Catalog of
// immutable snapshots the Caddy modules read on every request. The routing
// rules R1-R5 of the behaviour contract live here and nowhere else.
package catalog

// Labels with a meaning to caddy-dicer.
const (
	// LabelHost lists the hosts an instance serves, comma-separated.
	LabelHost = "caddy.host"
	// LabelPort names the guest port an instance serves on.
	LabelPort = "caddy.port"
	// LabelNetwork names the network to reach an instance on, when it is on
	// several (R11).
	LabelNetwork = "caddy.network"
	// LabelStandbyAfter opts an instance into scale to zero by Caddy
	// (Docker): after this long (a Go duration such as `15m`) with no
	// request through Caddy and none in flight, Caddy puts it on standby,
	// and a request wakes it.
	LabelStandbyAfter = "caddy.standby_after"
	// LabelStandby says how Caddy puts it on standby: `stop` (the
	// default) or `pause`.
	LabelStandby = "caddy.standby"
	// LabelWeight is the instance's share of its rotation's requests
	// under the dicer_weighted and dicer_sticky policies (R4c): an integer
	// from 0 to MaxWeight, default 1; 0 is a warm spare.
	LabelWeight = "caddy.weight"
	// LabelSessionKey is the identity dicer_sticky keys sessions by
	// (R4d), instead of the instance's name: an instance that takes over
	// the key takes over the sessions.
	LabelSessionKey = "caddy.session_key"
	// LabelMaintenance puts an instance in maintenance (R5i): it gets no
	// request and is not woken, and a request with nowhere else to go is
	// answered 503 with the maintenance page showing the label's value.
	LabelMaintenance = "caddy.maintenance"
	// LabelPath lists the path prefixes an instance serves under its
	// hosts, comma-separated (R2d): `/api,/admin`.
	LabelPath = "caddy.path"
	// LabelStripPath says whether the caddy.path prefix that routes a
	// request is cut from it before it is sent to this instance (R2d):
	// `true` or `false`; without it, the source's strip_path_prefix
	// decides. caddy-docker-proxy's handle_path translates to true, its
	// handle and Traefik's PathPrefix to false (R2f).
	LabelStripPath = "caddy.strip_path"
	// LabelSoftLimit makes an instance one of a pool that grows under
	// load (R5j): while every routable instance of a route has more than
	// this many requests in flight, Caddy wakes the next one on standby.
	LabelSoftLimit = "caddy.soft_limit"
	// LabelDependsOn is a label selector of the instances to wake, and
	// wait for, before this one is woken; they go on standby only once
	// every instance depending on them is (R5k).
	LabelDependsOn = "caddy.depends_on"
	// LabelMaxReplicas opts a replicated Swarm service into growing under
	// load (R5j): while every routable task of a route is past its
	// caddy.soft_limit, Caddy adds one replica, up to this many.
	LabelMaxReplicas = "caddy.max_replicas"
	// LabelMinReplicas is the fewest replicas Caddy scales such a service
	// back down to once its load fits in fewer (R5j); default 1.
	LabelMinReplicas = "caddy.min_replicas"
	// LabelHeal opts a Docker container with a health check into healing
	// by Caddy (R1e): once its check has kept it unhealthy this long (a
	// Go duration such as `30s`) or for this many checks (a count such
	// as `3`: that many times its health check's interval), Caddy
	// restarts it, with a growing backoff and at most heal_max_restarts
	// restarts an hour.
	LabelHeal = "caddy.heal"

	// LabelRollout, LabelVersion, LabelRolloutMaxErrors and
	// LabelRolloutMaxLatency are a progressive rollout's (R4f): their
	// meaning lives in package rollout.
	LabelRollout           = "caddy.rollout"
	LabelVersion           = "caddy.version"
	LabelRolloutMaxErrors  = "caddy.rollout_max_errors"
	LabelRolloutMaxLatency = "caddy.rollout_max_latency"
)

// KnownLabels is every label key caddy-dicer gives a meaning to, the one
// list the label lint (R13c, lint.go) and the docs' labels page check
// against.
var KnownLabels = []string{
	LabelHost, LabelPort, LabelNetwork, LabelStandbyAfter, LabelStandby,
	LabelWeight, LabelSessionKey, LabelMaintenance,
	LabelPath, LabelStripPath, LabelSoftLimit, LabelDependsOn,
	LabelMaxReplicas, LabelMinReplicas, LabelHeal, LabelMaxRequests,
	LabelStandbyCPU, LabelStandbyIgnore,
	LabelRollout, LabelVersion, LabelRolloutMaxErrors, LabelRolloutMaxLatency,
}

// State is an instance's lifecycle state, as its daemon reports it.
type State uint8

// States common to the daemons caddy-dicer follows.
const (
	StateUnknown State = iota
	StateStopped
	StateStarting
	StateRunning
	StatePaused
	StateStopping
	StateRestarting
	StateFailed
	StateStandby
)

var stateNames = [...]string{"unknown", "stopped", "starting", "running", "paused", "stopping", "restarting", "failed", "standby"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Health is the last verdict of an instance's health check.
type Health uint8

// Health verdicts. HealthNone means the instance has no health check.
const (
	HealthNone Health = iota
	HealthStarting
	HealthHealthy
	HealthUnhealthy
)

var healthNames = [...]string{"none", "starting", "healthy", "unhealthy"}

func (h Health) String() string {
	if int(h) < len(healthNames) {
		return healthNames[h]
	}
	return "none"
}

// Protocol of a published port.
type Protocol uint8

// Protocols.
const (
	TCP Protocol = iota
	UDP
)

func (p Protocol) String() string {
	if p == UDP {
		return "udp"
	}
	return "tcp"
}

// PublishedPort is a guest port the daemon forwards from a host port.
type PublishedPort struct {
	// HostIP is the host address the port is published on; "" means every
	// host address.
	HostIP    string
	HostPort  uint16
	GuestPort uint16
	Protocol  Protocol
}

// Instance is one VM or container, translated from its daemon. Adapters fill
// it in; the catalog never changes an Instance it was given.
type Instance struct {
	// ID is stable for the life of the instance (across renames).
	ID string
	// Name is unique on the daemon; upstreams are returned in name order.
	Name   string
	Labels map[string]string
	// Image identifies what the instance runs (Docker: its image's ID;
	// Dicer: its image's digest; "" unknown): the readiness probe learns
	// how long instances of one image take to listen (R1a).
	Image string
	// Networks are the networks the instance is attached to.
	Networks []Attachment
	Ports    []PublishedPort
	// Identity is what the daemon calls the instance's place, which a
	// replacement takes over (a Swarm task: its service and slot); ""
	// means its Name. Sticky sessions key on it unless the instance has a
	// caddy.session_key label (R4d).
	Identity string
	// State and Health are what the daemon last said of the instance.
	// (The small fields are kept together, after the others: a catalog
	// keeps an Instance per instance twice, in its entry and the
	// follower's, issue 43.)
	State  State
	Health Health
	// WakeOnConnect is true when a connection to a published port makes the
	// daemon wake the instance from standby (Dicer: standby_after is set).
	WakeOnConnect bool
	// Group is set on an instance that stands for others and is never
	// routed to itself (a Swarm service with the endpoint tasks: its
	// tasks are the instances routed to; it is there for the permission,
	// R7). Its State is StateStopped; the admin API and metrics show it
	// in the state "group", never "stopped".
	Group bool
}

// Attachment is an instance's place on one network.
type Attachment struct {
	Network string
	// Address is the instance's own IP on Network; "" when it has none.
	Address string
	// Gateway is the host's own address on Network, where ports published
	// on every host address can be reached (R4); "" when unknown.
	Gateway string
	// Host is set when the instance shares the host's network stack
	// (Docker's --network host): it has no address of its own, its ports
	// are the host's, and the catalog routes to them at the host address
	// R4 uses for published ports, never localhost (R11h).
	Host bool
}

// LabelRefused is set by the Docker and Swarm adapters, never by a
// tenant (they drop one the instance carries), on an instance whose
// caddy-docker-proxy or Traefik labels ask for what a dynamic source
// cannot do (R2f): its value says why. Such an instance serves no host
// and no path on any route, and the permission allows none of its
// hosts; the catalog warns once per change of the value.
const LabelRefused = "dicer.refused"
