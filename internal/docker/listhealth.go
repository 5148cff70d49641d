package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
)

// HealthListAPI is the Engine API version from which the container
// listing carries each container's health (Docker 29: API 1.52 and up).
// Older Engines give it only in the Status text ("Up 5 minutes
// (healthy)"), which the adapter reads instead.
const HealthListAPI = "1.52"

// Listed is a container of the listing, with the health that Engines from
// HealthListAPI on give beside the summary (nil from an older one, and
// from any Engine asked at an older API version). The client library's
// Summary (github.com/docker/docker v28) has no Health field.
type Listed struct {
	container.Summary
	Health *ListedHealth `json:",omitempty"`
}

// ListedHealth is the listing's health of one container: Status is
// "none", "starting", "healthy" or "unhealthy"; FailingStreak counts the
// failed checks in a row.
type ListedHealth struct {
	Status        string
	FailingStreak int
}

// HealthInList reports whether an Engine that serves API version api
// gives the health in its listing.
func HealthInList(api string) bool {
	return api != "" && !daemonver.OlderAPI(api, HealthListAPI)
}

// maxListing bounds a listing's answer read: a few KiB per container.
const maxListing = 64 << 20

// ListWithHealth lists the containers of the Engine cli talks to, asking
// at API version HealthListAPI so that each comes with its health (the
// Engine must serve it: HealthInList). useTLS says the client speaks TLS
// to a TCP address. The Swarm adapter lists its task containers with it.
func ListWithHealth(ctx context.Context, cli *client.Client, o container.ListOptions, useTLS bool) ([]Listed, error) {
	u, err := client.ParseHostURL(cli.DaemonHost())
	if err != nil {
		return nil, err
	}
	scheme, host := "http", u.Host
	if useTLS {
		scheme = "https"
	}
	if u.Scheme == "unix" || u.Scheme == "npipe" {
		host = client.DummyHost // the transport dials the socket
	}
	q := url.Values{}
	if o.All {
		q.Set("all", "1")
	}
	if o.Filters.Len() > 0 {
		f, err := filters.ToJSON(o.Filters)
		if err != nil {
			return nil, err
		}
		q.Set("filters", f)
	}
	target := scheme + "://" + host + u.Path + "/v" + HealthListAPI + "/containers/json"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "caddy-dicer")
	resp, err := cli.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListing))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var msg struct{ Message string }
		_ = json.Unmarshal(body, &msg)
		if msg.Message == "" {
			msg.Message = string(body[:min(len(body), 200)])
		}
		return nil, fmt.Errorf("GET /v%s/containers/json: %s: %s", HealthListAPI, resp.Status, msg.Message)
	}
	var out []Listed
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("reading the container listing: %w", err)
	}
	return out, nil
}

// listed wraps an older Engine's listing (no health beside it).
func listed(list []container.Summary) []Listed {
	out := make([]Listed, len(list))
	for i, s := range list {
		out[i] = Listed{Summary: s}
	}
	return out
}
