package diceradmin

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// maxWeightBody bounds the body of POST /dicer/weight.
const maxWeightBody = 64 << 10

// weight serves POST /dicer/weight: it sets or clears the runtime weight
// of every instance the request chooses, on every daemon followed (and,
// with a storage shared by a fleet of Caddys, on every Caddy of it: R4e),
// and answers with those instances. The next request routed sees it; nothing
// is loaded. A weight lives on the instance's catalog entry, so nothing a
// caller sends can grow memory beyond the instances: it goes with the
// instance, and no instance that appears later gets it. In a fleet, the
// record in the storage is bounded (fleet.MaxWeightSwitches: a weight
// beyond it, with no weight of a gone instance left to make room, is 409),
// and a clear also removes the weights of instances gone from the daemon,
// those named by instance answered with "gone": true (R4e).
func (adminDicer) weight(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use POST", r.Method)}
	}
	req, err := DecodeWeightRequest(io.LimitReader(r.Body, maxWeightBody))
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	sel, err := selector.Parse(req.Selector)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	match := func(labels map[string]string, name string) bool {
		return (req.Instance == "" || name == req.Instance) && (req.Selector == "" || sel.Matches(labels))
	}
	weight := -1 // clear
	if req.Weight != nil {
		weight = *req.Weight
	}
	out := []WeightChange{}
	for _, c := range dicerapp.Connections() {
		changes, gone, err := c.SetWeight(match, weight) // in a fleet, for every Caddy of it (R4e)
		if errors.Is(err, connection.ErrWeightsFull) {
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("%s %s: %w: clear some first", c.Kind(), c.Address(), err)}
		}
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("%s %s: %w", c.Kind(), c.Address(), err)}
		}
		for _, ch := range changes {
			out = append(out, WeightChange{Kind: c.Kind(), Daemon: c.Address(), ID: ch.ID, Name: ch.Name, Weight: ch.Weight, Runtime: ch.Runtime})
		}
		for _, g := range gone {
			out = append(out, WeightChange{Kind: c.Kind(), Daemon: c.Address(), ID: g.ID, Name: g.Name, Gone: true})
		}
	}
	if len(out) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("no instance of a followed daemon matches")}
	}
	return writeJSON(w, out)
}
