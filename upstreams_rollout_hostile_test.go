package caddydicer

import (
	"os"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
)

// An open finding of the hostile review (R4f): a route's versions are
// the route's, not a host's. On a selector route that serves two tenants'
// hosts, tenant B rolls b1 out to b2; tenant A adding a container of a new
// image with caddy.rollout abandons B's rollout (B's b2 gets weight 0) and
// writes weight 0 onto B's instances in the daemon's switches. Skipped
// unless DICER_OPEN_FINDINGS is set.
func TestRollout_R4f_open_another_tenant_on_the_route_abandons_a_rollout(t *testing.T) {
	if os.Getenv("DICER_OPEN_FINDINGS") == "" {
		t.Skip("an open finding of the hostile review; set DICER_OPEN_FINDINGS=1 to run it")
	}
	at := func(v string, i int, host string) catalog.Instance {
		in := rolloutInstance(v, i)
		in.Labels["caddy.host"] = host
		return in
	}
	b1, b2 := at("b1", 0, "b.example"), at("b2", 1, "b.example")
	a1 := at("a1", 2, "a.example")
	delete(a1.Labels, rollout.LabelRollout)
	rr, c := rolloutCaddy(t, "x", &fleet.Memory{}, a1, b1)
	t0 := time.Now()
	rr.look(t0)
	c.Replace([]catalog.Instance{a1, b1, b2})
	rr.look(t0.Add(time.Second))
	if rr.state == nil || rr.state.New != "b2" || rr.state.Share() != 20 {
		t.Fatalf("B's rollout did not begin: %+v", rr.state)
	}
	a2 := at("a2", 3, "a.example")
	c.Replace([]catalog.Instance{a1, b1, b2, a2})
	rr.lastSnap = nil
	rr.look(t0.Add(2 * time.Second))
	if rr.state == nil || rr.state.New != "b2" || rr.state.Verdict != rollout.Rolling {
		t.Errorf("tenant A's new container changed B's rollout: %+v", rr.state)
	}
	if w := weightOf(c, "web-b2"); w == 0 {
		t.Errorf("B's new version has weight 0 after A's deploy")
	}
}
