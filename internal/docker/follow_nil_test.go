package docker

import (
	"errors"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

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
