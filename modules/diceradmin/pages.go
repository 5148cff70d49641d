package diceradmin

import (
	_ "embed" // the dashboard page
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

//go:embed dashboard.html
var dashboardPage []byte

// ServeDashboard serves the dashboard page (the admin API's GET
// /dicer/dashboard, and `caddy dicer dashboard`): one file, its script and style inline, which
// reads the JSON routes twice a second and builds its tables with
// textContent only, so nothing from a label is ever markup.
func ServeDashboard(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	_, err := w.Write(dashboardPage)
	return err
}

// DecodeWeightRequest reads and checks a WeightRequest, as POST
// /dicer/weight takes it.
func DecodeWeightRequest(body io.Reader) (WeightRequest, error) {
	var req WeightRequest
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
