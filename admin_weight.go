package caddydicer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-dicer/caddy-dicer/adminapi"
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// maxWeightBody bounds the body of POST /dicer/weight.
const maxWeightBody = 64 << 10

// weight serves POST /dicer/weight: it sets or clears the runtime weight
// of every instance the request chooses, on every daemon followed, and
// answers with those instances. The next request routed sees it; nothing
// is loaded. A weight lives on the instance's catalog entry, so nothing a
// caller sends can grow memory beyond the instances: it goes with the
// instance, and no instance that appears later gets it.
func (adminDicer) weight(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: use POST", r.Method)}
	}
	req, err := decodeWeightRequest(io.LimitReader(r.Body, maxWeightBody))
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
	out := []adminapi.WeightChange{}
	for _, c := range openConnections() {
		for _, ch := range c.catalog.SetWeight(match, weight) {
			out = append(out, adminapi.WeightChange{Kind: c.kind, Daemon: c.address, WeightChange: ch})
		}
	}
	if len(out) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("no instance of a followed daemon matches")}
	}
	return writeJSON(w, out)
}

// decodeWeightRequest reads and checks an adminapi.WeightRequest.
func decodeWeightRequest(body io.Reader) (adminapi.WeightRequest, error) {
	var req adminapi.WeightRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("decoding the body: %w (want {\"selector\": \"app=web\", \"weight\": 5} or {\"instance\": \"web-1\", \"clear\": true})", err)
	}
	switch {
	case req.Selector == "" && req.Instance == "":
		return req, errors.New("selector or instance: give one, to choose the instances")
	case (req.Weight == nil) == !req.Clear:
		return req, errors.New("weight or clear: give one")
	case req.Weight != nil && (*req.Weight < 0 || *req.Weight > catalog.MaxWeight):
		return req, fmt.Errorf("weight: %d is not from 0 to %s", *req.Weight, strconv.Itoa(catalog.MaxWeight))
	}
	return req, nil
}
