package docker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

var docker29 = types.Version{Version: "29.0.0-beta.18", APIVersion: "1.55", MinAPIVersion: "1.44",
	Components: []types.ComponentVersion{{Name: "Engine", Version: "29.0.0-beta.18"}}}

// R1: Docker 29 (API 1.52 and up) gives each container's health beside it
// in the listing; the adapter reads it there, not from the Status text,
// and inspects no container whose health it tells (an "unhealthy" is
// still inspected, R1c). An older Engine's listing is read from its text.
func TestListing_R1_health_beside_the_listing_on_Docker_29(t *testing.T) {
	base := readPodmanList(t)[0]
	base.Status = "Up 1 second" // a text that says "no check"
	for _, tc := range []struct {
		name        string
		version     types.Version
		health      *ListedHealth
		want        catalog.Health
		inspects    int64
		healthLists int64
	}{
		{"Docker 29 starting", docker29, &ListedHealth{Status: "starting"}, catalog.HealthStarting, 0, 1},
		{"Docker 29 healthy", docker29, &ListedHealth{Status: "healthy"}, catalog.HealthHealthy, 0, 1},
		{"Docker 29 no check", docker29, &ListedHealth{Status: "none"}, catalog.HealthNone, 0, 1},
		{"Docker 29 unhealthy", docker29, &ListedHealth{Status: "unhealthy", FailingStreak: 3}, catalog.HealthUnhealthy, 1, 1},
		{"Docker 20.10", types.Version{Version: "20.10.24", APIVersion: "1.41", Components: []types.ComponentVersion{{Name: "Engine"}}}, nil, catalog.HealthNone, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePodman{version: tc.version, list: []container.Summary{base}, events: make(chan events.Message),
				listHealth: map[string]*ListedHealth{base.ID: tc.health},
				inspect:    func(string) container.InspectResponse { return inspectWithHealth(base, container.Unhealthy) }}
			sink := runFake(t, f)
			v := sink.WaitFor(t, waitTimeout, "the listed container", func(v followtest.View) bool { _, ok := v.Named("cdp-h"); return ok })
			in, _ := v.Named("cdp-h")
			if in.Health != tc.want {
				t.Errorf("health %v, want %v", in.Health, tc.want)
			}
			if n := f.inspects.Load(); n != tc.inspects {
				t.Errorf("%d inspections, want %d", n, tc.inspects)
			}
			if n := f.healthLists.Load(); n != tc.healthLists {
				t.Errorf("%d listings at API %s, want %d (and %d older ones)", n, HealthListAPI, tc.healthLists, f.lists.Load())
			}
		})
	}
}

// ListWithHealth asks at API 1.52, with the listing's options, through the
// client's own transport, and reads the health beside each container; an
// Engine's refusal is an error that quotes it.
func TestListWithHealth(t *testing.T) {
	var got *url.URL
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL
		if r.URL.Query().Get("all") == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"message":"client version 1.52 is too new"}`))
			return
		}
		_, _ = w.Write([]byte(`[{"Id":"abc","Names":["/a"],"State":"running","Status":"Up 2 seconds (healthy)","Health":{"Status":"healthy","FailingStreak":0}},
			{"Id":"def","Names":["/b"],"State":"exited","Status":"Exited (0)"}]`))
	}))
	defer srv.Close()
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := ListWithHealth(context.Background(), cli, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "x=y"))}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != "/v1.52/containers/json" || got.Query().Get("filters") != `{"label":{"x=y":true}}` {
		t.Errorf("asked %s", got)
	}
	if len(list) != 2 || list[0].ID != "abc" || list[0].Health == nil || list[0].Health.Status != "healthy" || list[1].Health != nil || list[1].State != "exited" {
		t.Errorf("listing %+v", list)
	}
	if _, err := ListWithHealth(context.Background(), cli, container.ListOptions{}, false); err == nil || err.Error() != "GET /v1.52/containers/json: 400 Bad Request: client version 1.52 is too new" {
		t.Errorf("refusal: %v", err)
	}
}
