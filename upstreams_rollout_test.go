package caddydicer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// rolloutInstance is a routable instance of app=web at version v.
func rolloutInstance(v string, i int) catalog.Instance {
	name := "web-" + v
	return catalog.Instance{ID: name, Name: name, State: catalog.StateRunning, Image: "sha256:" + v,
		Labels: map[string]string{"app": "web", rollout.LabelVersion: v,
			rollout.LabelRollout: "20%,50%,100% every 10s settle 2s min 10"},
		Networks: []catalog.Attachment{{Network: "default", Address: "10.0.0." + string(rune('1'+i))}},
		Ports:    []catalog.PublishedPort{{GuestPort: 8080, HostPort: uint16(20000 + i)}},
	}
}

// rolloutCaddy is one Caddy of a fleet on storage, as its route sees it.
func rolloutCaddy(t *testing.T, id string, storage fleet.Storage, insts ...catalog.Instance) (*routeRollout, *catalog.Catalog) {
	t.Helper()
	c := catalog.New(catalog.Options{})
	c.Replace(insts)
	conn := connection.Fixture{Kind: "docker", Address: "unix:///rollout.sock", Catalog: c}.Conn()
	conn.ShareThrough(storage, fleet.Self{ID: id})
	t.Cleanup(func() { _ = conn.Destruct() })
	src := &upstreamSource{conn: conn, logger: zap.NewNop()}
	return newRouteRollout(src), c
}

func newRouteRollout(src *upstreamSource) *routeRollout {
	rr := &routeRollout{s: src, name: "app=web port 8080", match: selector.MustParse("app=web").Matches, logger: zap.NewNop(),
		units: map[string]*unitRollout{}, warned: map[string]bool{}}
	src.rollout = rr
	return rr
}

// un is rr's unit of hosts key hosts ("": the instances without
// caddy.host), a zero one when it has none.
func un(rr *routeRollout, hosts string) *unitRollout {
	if u := rr.units[hosts]; u != nil {
		return u
	}
	return &unitRollout{}
}

func weightOf(c *catalog.Catalog, name string) int {
	for _, st := range c.Instances(nil) {
		if st.Name == name {
			return st.Weight
		}
	}
	return -1
}

// R4f through the fleet's record: two Caddys on one storage, one decides
// and writes the shares, the other applies them within a second (its
// switches read); a step passes on the decider's counters; the decider
// restarted resumes at its step; a silent decider is replaced.
func TestRollout_R4f_two_Caddys_one_verdict_and_a_restart_resumes(t *testing.T) {
	storage := &fleet.Memory{}
	v1, v2 := rolloutInstance("v1", 0), rolloutInstance("v2", 1)
	a, ca := rolloutCaddy(t, "a", storage, v1)
	b, cb := rolloutCaddy(t, "b", storage, v1)
	t0 := time.Now()
	a.look(t0)
	if un(a, "").state != nil {
		t.Fatalf("one version: a rollout %+v", *un(a, "").state)
	}
	ca.Replace([]catalog.Instance{v1, v2})
	cb.Replace([]catalog.Instance{v1, v2})
	a.look(t0.Add(time.Second))
	b.look(t0.Add(time.Second + 100*time.Millisecond))
	if un(a, "").state == nil || !un(a, "").decider || un(a, "").state.Share() != 20 || un(a, "").state.Old != "v1" || un(a, "").state.New != "v2" {
		t.Fatalf("a: %+v, decider %v; want v1 -> v2 at 20%%, deciding", un(a, "").state, un(a, "").decider)
	}
	if un(b, "").state == nil || un(b, "").decider || un(b, "").state.Share() != 20 {
		t.Fatalf("b: %+v, decider %v; want it following at 20%%", un(b, "").state, un(b, "").decider)
	}
	if wa1, wa2 := weightOf(ca, "web-v1"), weightOf(ca, "web-v2"); wa1 != 8000 || wa2 != 2000 {
		t.Fatalf("a's weights %d/%d, want 8000/2000", wa1, wa2)
	}
	testkit.Eventually(t, 3*time.Second, "b applies the shares", func() bool {
		return weightOf(cb, "web-v1") == 8000 && weightOf(cb, "web-v2") == 2000
	})
	// The decider's counters: a healthy window after the settle time.
	serve := func(rr *routeRollout, n int) {
		for range n {
			rr.counter("web-v1").Record(200, 5*time.Millisecond)
			rr.counter("web-v2").Record(200, 5*time.Millisecond)
		}
	}
	serve(a, 5)
	a.look(t0.Add(4 * time.Second)) // the window begins
	serve(a, 20)
	a.look(t0.Add(12 * time.Second)) // the step's end: passed
	if un(a, "").state.Step != 1 || un(a, "").state.Share() != 50 {
		t.Fatalf("a after the first step: %+v", *un(a, "").state)
	}
	// a restarts: a new route of the same Caddy resumes at its step.
	a2 := newRouteRollout(a.s)
	a2.look(t0.Add(13 * time.Second))
	if un(a2, "").state == nil || !un(a2, "").decider || un(a2, "").state.Step != 1 || !un(a2, "").state.Started.Equal(un(a, "").state.Started) {
		t.Fatalf("a restarted: %+v, decider %v; want step 1 of the same rollout", un(a2, "").state, un(a2, "").decider)
	}
	// a falls silent: b takes over after the claim's time.
	b.look(t0.Add(13*time.Second + rollout.ClaimTTL + time.Second))
	if !un(b, "").decider || un(b, "").state.Step != 1 || un(b, "").state.Owner != "b" {
		t.Fatalf("b after a's silence: %+v, decider %v", un(b, "").state, un(b, "").decider)
	}
}

// R4f on a full switches record (R4e): when the rollout's weights cannot
// be written (10,000 weights on the daemon, none of a gone instance), its
// status says so and its step waits, unjudged, rather than going on with
// shares not in force; once there is room, the weights are written and
// the step is judged again.
func TestRollout_R4f_a_full_switches_record_blocks_visibly(t *testing.T) {
	storage := &fleet.Memory{}
	f := fleet.New(fleet.Self{ID: "operator"})
	f.SetStorage(storage)
	fill := func(n int) {
		t.Helper()
		if _, err := f.UpdateSwitches(t.Context(), "docker unix:///rollout.sock", func(sw *fleet.Switches) error {
			sw.Weights = map[string]fleet.WeightSwitch{}
			for i := range n {
				sw.Weights[fmt.Sprintf("other-%05d", i)] = fleet.WeightSwitch{Weight: 1, From: "operator", At: time.Now()}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	fill(fleet.MaxWeightSwitches)
	v1, v2 := rolloutInstance("v1", 0), rolloutInstance("v2", 1)
	rr, c := rolloutCaddy(t, "x", storage, v1)
	t0 := time.Now()
	rr.look(t0)
	c.Replace([]catalog.Instance{v1, v2})
	rr.look(t0.Add(time.Second))
	sts := rr.s.RolloutStatuses()
	if len(sts) != 1 || sts[0].Share != 20 || !strings.Contains(sts[0].Blocked, "switches record") {
		t.Fatalf("statuses on a full record: %+v; want the rollout at 20%% with why it is blocked", sts)
	}
	if weightOf(c, "web-v2") != 1 {
		t.Fatalf("web-v2's weight %d on a full record", weightOf(c, "web-v2"))
	}
	for i := 0; i < 20; i++ { // a whole step and more: it does not pass unjudged
		rr.counter("web-v1").Record(200, time.Millisecond)
		rr.counter("web-v2").Record(200, time.Millisecond)
		rr.lastSnap = nil
		rr.look(t0.Add(time.Duration(2+i) * time.Second))
	}
	if st := un(rr, "").state; st.Step != 0 || st.Verdict != rollout.Rolling {
		t.Fatalf("the blocked step moved: %+v", *st)
	}
	fill(fleet.MaxWeightSwitches - 2)
	rr.lastSnap = nil
	rr.look(t0.Add(30 * time.Second))
	if sts := rr.s.RolloutStatuses(); len(sts) != 1 || sts[0].Blocked != "" || weightOf(c, "web-v2") != 2000 || weightOf(c, "web-v1") != 8000 {
		t.Fatalf("with room: %+v, weights %d/%d", sts, weightOf(c, "web-v1"), weightOf(c, "web-v2"))
	}
	for i := 0; i < 12; i++ { // judged again, on requests its shares split
		for range 5 {
			rr.counter("web-v1").Record(200, time.Millisecond)
			rr.counter("web-v2").Record(200, time.Millisecond)
		}
		rr.look(t0.Add(time.Duration(31+i) * time.Second))
	}
	if st := un(rr, "").state; st.Step != 1 {
		t.Errorf("after room, the step was not judged: %+v", *st)
	}
}

// R4f: with the fleet's record of rollouts full (1,000 entries, none
// ended), a new rollout is refused, and says so in its status (and once
// in the log) rather than not rolling out unseen; it begins once there is
// room.
func TestRollout_R4f_a_full_record_of_rollouts_is_refused_visibly(t *testing.T) {
	storage := &fleet.Memory{}
	v1, v2 := rolloutInstance("v1", 0), rolloutInstance("v2", 1)
	rr, c := rolloutCaddy(t, "x", storage, v1)
	t0 := time.Now()
	fill := func(n int) {
		t.Helper()
		if _, err := rr.s.conn.UpdateRollouts(t.Context(), func([]byte) ([]byte, error) {
			var rec rollout.Record
			for i := range n {
				st := rollout.Begin("o1", "o2", rollout.Default(), t0)
				st.Owner, st.Claimed = "other", t0
				if err := rec.Put(fmt.Sprintf("other-route-%04d", i), st); err != nil {
					return nil, err
				}
			}
			return rec.Encode()
		}); err != nil {
			t.Fatal(err)
		}
	}
	fill(rollout.MaxRoutes)
	rr.look(t0)
	c.Replace([]catalog.Instance{v1, v2})
	rr.look(t0.Add(time.Second))
	sts := rr.s.RolloutStatuses()
	if len(sts) != 1 || sts[0].Verdict != "" || sts[0].Old != "v1" || sts[0].New != "v2" || !strings.Contains(sts[0].Blocked, "no rollout recorded") {
		t.Fatalf("statuses on a full record of rollouts: %+v; want v1 -> v2 refused, saying why", sts)
	}
	fill(rollout.MaxRoutes - 1)
	rr.look(t0.Add(2 * time.Second)) // no catalog change: a refused rollout tries again
	if st := un(rr, "").state; st == nil || st.New != "v2" || st.Share() != 20 || un(rr, "").refused != "" {
		t.Fatalf("with room: %+v", st)
	}
}
