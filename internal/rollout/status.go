package rollout

import "errors"

// ErrNoRollout is a command's error on a route with no rollout under way.
var ErrNoRollout = errors.New("no rollout under way on the route")

// Status is a route's rollout as the admin API (`GET /dicer/rollouts`)
// answers it and `caddy dicer rollouts` prints it.
type Status struct {
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	Route  string `json:"route"`
	// Hosts are the hosts the rollout's instances list in caddy.host
	// (sorted, comma-separated): a route's rollouts are its units'
	// (R4f); "" for its instances without caddy.host.
	Hosts string `json:"hosts,omitempty"`
	State
	// Share is the new version's share of new requests, in percent;
	// Drained says the old version gets none (done).
	Share   int  `json:"share"`
	Drained bool `json:"drained"`
	// Decider says this Caddy decides the rollout.
	Decider bool `json:"decider"`
	// Config is the rollout's settings as read from the labels.
	Config string `json:"config,omitempty"`
	// Blocked says why the rollout is refused (no room in the fleet's
	// record of rollouts) or why its step waits (its weights cannot be
	// written: the switches record is full); "" when neither.
	Blocked string `json:"blocked,omitempty"`
}

// Command is what `POST /dicer/rollouts` takes: promote or abort a
// route's rollout.
type Command struct {
	Route string `json:"route"`
	// Hosts, when set, picks the route's rollout whose instances list
	// those hosts (in any order); else every rollout of the route.
	Hosts  string `json:"hosts,omitempty"`
	Action string `json:"action"` // promote, abort
}
