package diceradmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// RolloutStatus is a route's rollout as GET /dicer/rollouts answers it
// (R4f).
type RolloutStatus = rollout.Status

// RolloutCommand is what POST /dicer/rollouts takes: {"route": ...,
// "action": "promote"|"abort"}, and "hosts" to pick one of the route's
// rollouts (R4f: a route's rollouts are per hosts).
type RolloutCommand = rollout.Command

// rolloutRoute is an upstream source that rolls out (the root's).
type rolloutRoute interface {
	RolloutStatuses() []rollout.Status
	RolloutCommand(action, hosts, who string) error
}

// maxRolloutBody bounds the body of POST /dicer/rollouts.
const maxRolloutBody = 4 << 10

// rollouts serves /dicer/rollouts: GET lists the rollouts of the routes
// this Caddy serves (version, step, shares, figures, verdict and why),
// one per route and hosts; POST promotes or aborts one route's rollouts
// (every route of that name; those of the hosts named, if any),
// through the fleet's record, for every Caddy of the fleet (R4f).
func (adminDicer) rollouts(w http.ResponseWriter, r *http.Request) error {
	switch r.Method {
	case http.MethodGet:
		return writeJSON(w, rolloutStatuses())
	case http.MethodPost:
		var cmd RolloutCommand
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRolloutBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cmd); err != nil {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("the body: %w", err)}
		}
		if cmd.Action != "promote" && cmd.Action != "abort" {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("action %q: promote or abort", cmd.Action)}
		}
		host, _ := os.Hostname()
		who := "the admin API of " + host
		done := []RolloutStatus{}
		found := false
		for _, c := range dicerapp.Connections() {
			for _, nr := range c.Routes() {
				rr, ok := nr.Route.(rolloutRoute)
				if !ok || nr.Name != cmd.Route {
					continue
				}
				found = true
				if err := rr.RolloutCommand(cmd.Action, cmd.Hosts, who); err != nil {
					if errors.Is(err, rollout.ErrNoRollout) {
						continue
					}
					return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
				}
				done = append(done, rr.RolloutStatuses()...)
			}
		}
		if !found || len(done) == 0 {
			where := fmt.Sprintf("%q", cmd.Route)
			if cmd.Hosts != "" {
				where += fmt.Sprintf(" for the hosts %q", cmd.Hosts)
			}
			return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("no rollout under way on a route named " + where)}
		}
		return writeJSON(w, done)
	}
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use GET or POST", r.Method)}
}

// rolloutStatuses are the rollouts of every route this Caddy serves, by
// daemon, route and hosts: what GET /dicer/rollouts answers and the
// dashboard shows.
func rolloutStatuses() []RolloutStatus {
	out := []RolloutStatus{}
	for _, c := range dicerapp.Connections() {
		for _, nr := range c.Routes() {
			if rr, ok := nr.Route.(rolloutRoute); ok {
				out = append(out, rr.RolloutStatuses()...)
			}
		}
	}
	slices.SortFunc(out, func(a, b RolloutStatus) int {
		return strings.Compare(a.Kind+a.Daemon+a.Route+"\n"+a.Hosts, b.Kind+b.Daemon+b.Route+"\n"+b.Hosts)
	})
	return out
}
