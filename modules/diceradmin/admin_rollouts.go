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
// "action": "promote"|"abort"}.
type RolloutCommand = rollout.Command

// rolloutRoute is an upstream source that rolls out (the root's).
type rolloutRoute interface {
	RolloutStatus() (rollout.Status, bool)
	RolloutCommand(action, who string) error
}

// maxRolloutBody bounds the body of POST /dicer/rollouts.
const maxRolloutBody = 4 << 10

// rollouts serves /dicer/rollouts: GET lists the rollouts of the routes
// this Caddy serves (version, step, shares, figures, verdict and why);
// POST promotes or aborts one route's rollout (every route of that name),
// through the fleet's record, for every Caddy of the fleet (R4f).
func (adminDicer) rollouts(w http.ResponseWriter, r *http.Request) error {
	switch r.Method {
	case http.MethodGet:
		out := []RolloutStatus{}
		for _, c := range dicerapp.Connections() {
			for _, nr := range c.Routes() {
				if rr, ok := nr.Route.(rolloutRoute); ok {
					if st, ok := rr.RolloutStatus(); ok {
						out = append(out, st)
					}
				}
			}
		}
		slices.SortFunc(out, func(a, b RolloutStatus) int {
			return strings.Compare(a.Kind+a.Daemon+a.Route, b.Kind+b.Daemon+b.Route)
		})
		return writeJSON(w, out)
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
				if err := rr.RolloutCommand(cmd.Action, who); err != nil {
					if errors.Is(err, rollout.ErrNoRollout) {
						continue
					}
					return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
				}
				if st, ok := rr.RolloutStatus(); ok {
					done = append(done, st)
				}
			}
		}
		if !found || len(done) == 0 {
			return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("no rollout under way on a route named " + fmt.Sprintf("%q", cmd.Route))}
		}
		return writeJSON(w, done)
	}
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use GET or POST", r.Method)}
}
