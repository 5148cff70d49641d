package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// R2g: an inspection that tells no labels at all (no Config) is decided
// on no labels, as the listing decides a container without labels: not
// followed by `follow env=prod`. It never falls open into the catalog.
func TestFollow_R2g_an_inspection_without_config_is_decided_on_no_labels(t *testing.T) {
	c := &conn{log: zap.NewNop(), stopTimeouts: map[string]time.Duration{}, recheck: newRechecks(),
		follow: selector.MustParse("env=prod")}
	in := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "x", Name: "/x",
		State: &container.State{Status: "running", Running: true}}}
	if got, err := c.Finish("x", in, nil); !errors.Is(err, follow.ErrUnusable) {
		t.Errorf("an inspection without Config, follow env=prod: %+v, %v; want not followed (ErrUnusable)", got, err)
	}
	if !c.unfollowed.skip("x", false) {
		t.Error("its later events are not dropped")
	}
}

// R2g: the "connected" line says which containers the connection follows
// and how many it left out, so that a selector matching nothing (quotes
// kept from an env file: `"env=prod"`) is seen, not a silent empty
// catalog.
func TestFollow_R2g_the_listing_says_the_selector_and_how_many_are_left_out(t *testing.T) {
	c := followListingConn(t, `"env=prod"`)
	l, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fields := listingFields(l)
	if got := fields["follow"]; got != `"env=prod"` {
		t.Errorf("follow field %v, want the selector", got)
	}
	if got := fields["not_followed"]; got != int64(3) {
		t.Errorf("not_followed field %v (%T), want 3", got, got)
	}
}

// R2g: the connected line's not_followed is the listing's count, taken
// before the set goes to the stream, which forgets a container at its
// destroy event meanwhile (the race detector caught len() of the map the
// stream was deleting from, in a clean-clone run).
func TestFollow_R2g_the_listing_counts_before_the_stream_forgets(t *testing.T) {
	c := followListingConn(t, "env=prod")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the stream: destroy events of the containers not followed
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				c.unfollowed.skip("b", true)
				c.unfollowed.skip("c", true)
			}
		}
	}()
	for i := range 200 {
		l, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := listingFields(l)["not_followed"]; got != int64(2) {
			t.Fatalf("listing %d: not_followed %v, want 2 (the listing's own count)", i, got)
		}
	}
	close(stop)
	<-done
}

// followListingConn is a connection following sel whose Engine lists
// three exited containers: a (env=prod), b and c (env=staging).
func followListingConn(t *testing.T, sel string) *conn {
	t.Helper()
	base := readPodmanList(t)[0]
	summary := func(id, env string) container.Summary {
		s := base
		s.ID, s.Names, s.State, s.Status = id, []string{"/" + id}, "exited", "Exited (0) 1 second ago"
		s.Labels = map[string]string{"env": env}
		return s
	}
	f := &fakePodman{
		version: types.Version{Version: "28.5.2", APIVersion: "1.41", Components: []types.ComponentVersion{{Name: "Engine"}}},
		list:    []container.Summary{summary("a", "prod"), summary("b", "staging"), summary("c", "staging")},
	}
	return &conn{eng: f, log: zap.NewNop(), stopTimeouts: map[string]time.Duration{}, recheck: newRechecks(),
		follow: selector.MustParse(sel)}
}

// listingFields are the fields of a listing's "connected" line.
func listingFields(l follow.Listing) map[string]any {
	enc := zapcore.NewMapObjectEncoder()
	for _, fl := range l.Fields {
		fl.AddTo(enc)
	}
	return enc.Fields
}
