package caddydicer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
)

// hostedInstance is rolloutInstance serving host (caddy.host).
func hostedInstance(v string, i int, host string) catalog.Instance {
	in := rolloutInstance(v, i)
	in.Labels[catalog.LabelHost] = host
	return in
}

// A finding of the hostile review (R4f): on a selector route that serves
// several tenants' hosts, a route's versions were the route's. Tenant B
// rolling b1 out to b2 wrote weight 0 onto tenant A's and C's instances
// (any other version), and tenant A adding a container of a new image
// with caddy.rollout abandoned B's rollout (b2 to 0) and wrote 0 onto B's
// instances. A route's rollouts are now its units': the instances that
// list the same hosts. Each tenant's rollout begins, advances and weighs
// only its own versions' instances, under an entry of its own.
func TestRollout_R4f_another_tenant_on_the_route_touches_no_other_rollout(t *testing.T) {
	b1, b2 := hostedInstance("b1", 0, "b.example"), hostedInstance("b2", 1, "b.example")
	a1 := hostedInstance("a1", 2, "a.example")
	delete(a1.Labels, rollout.LabelRollout)
	c1 := hostedInstance("c1", 4, "c.example")
	delete(c1.Labels, rollout.LabelRollout)
	c1.Labels[catalog.LabelWeight] = "7"
	storage := &fleet.Memory{}
	rr, c := rolloutCaddy(t, "x", storage, a1, b1, c1)
	t0 := time.Now()
	rr.look(t0)
	c.Replace([]catalog.Instance{a1, b1, b2, c1})
	rr.look(t0.Add(time.Second))
	b := un(rr, "b.example")
	if b.state == nil || b.state.New != "b2" || b.state.Share() != 20 {
		t.Fatalf("B's rollout did not begin: %+v", b.state)
	}
	if wb1, wb2 := weightOf(c, "web-b1"), weightOf(c, "web-b2"); wb1 != 8000 || wb2 != 2000 {
		t.Fatalf("B's weights %d/%d, want 8000/2000", wb1, wb2)
	}
	if wa1, wc1 := weightOf(c, "web-a1"), weightOf(c, "web-c1"); wa1 != 1 || wc1 != 7 {
		t.Errorf("B's rollout weighed other tenants' instances: a1 %d (want 1), c1 %d (want its label's 7)", wa1, wc1)
	}
	a2 := hostedInstance("a2", 3, "A.example.") // the same host, as routing reads it
	c.Replace([]catalog.Instance{a1, b1, b2, a2, c1})
	rr.look(t0.Add(2 * time.Second))
	if b.state == nil || b.state.New != "b2" || b.state.Old != "b1" || b.state.Verdict != rollout.Rolling || b.state.Share() != 20 {
		t.Errorf("tenant A's new container changed B's rollout: %+v", b.state)
	}
	if wb1, wb2 := weightOf(c, "web-b1"), weightOf(c, "web-b2"); wb1 != 8000 || wb2 != 2000 {
		t.Errorf("B's weights after A's deploy %d/%d, want 8000/2000", wb1, wb2)
	}
	a := un(rr, "a.example")
	if a.state == nil || a.state.Old != "a1" || a.state.New != "a2" || a.state.Share() != 20 {
		t.Errorf("A's own rollout: %+v; want a1 -> a2 at 20%%", a.state)
	}
	if wa1, wa2, wc1 := weightOf(c, "web-a1"), weightOf(c, "web-a2"), weightOf(c, "web-c1"); wa1 != 8000 || wa2 != 2000 || wc1 != 7 {
		t.Errorf("weights a1 %d, a2 %d, c1 %d; want 8000, 2000 and c1's label's 7", wa1, wa2, wc1)
	}
	raw, err := rr.s.conn.LoadRollouts(t.Context())
	rec, _, _ := rollout.Decode(raw, t0.Add(2*time.Second))
	if err != nil || len(rec.Rollouts) != 2 {
		t.Errorf("the fleet's record: %d entries (%v), want one per tenant's hosts", len(rec.Rollouts), err)
	}
	sts := rr.s.RolloutStatuses()
	if len(sts) != 2 || sts[0].Hosts != "a.example" || sts[1].Hosts != "b.example" || sts[1].New != "b2" {
		t.Errorf("statuses: %+v; want A's then B's", sts)
	}
	// An operator aborts A's rollout by its hosts: B's goes on.
	if err := rr.s.RolloutCommand("abort", "a.example", "test"); err != nil {
		t.Fatal(err)
	}
	if a.state.Verdict != rollout.RolledBack || b.state.Verdict != rollout.Rolling || weightOf(c, "web-a2") != 0 || weightOf(c, "web-b2") != 2000 {
		t.Errorf("abort of a.example: A %s, B %s, a2 %d, b2 %d", a.state.Verdict, b.state.Verdict, weightOf(c, "web-a2"), weightOf(c, "web-b2"))
	}
}

// Within one unit, a third version during a rollout abandons it: the
// superseded new version gets 0 (it is one of the rollout's own
// versions), and the newest rolls out against the stable one.
func TestRollout_R4f_a_newer_version_retires_the_one_rolling(t *testing.T) {
	v1, v2, v3 := rolloutInstance("v1", 0), rolloutInstance("v2", 1), rolloutInstance("v3", 2)
	rr, c := rolloutCaddy(t, "x", &fleet.Memory{}, v1)
	t0 := time.Now()
	rr.look(t0)
	c.Replace([]catalog.Instance{v1, v2})
	rr.look(t0.Add(time.Second))
	c.Replace([]catalog.Instance{v1, v2, v3})
	rr.look(t0.Add(2 * time.Second))
	st := un(rr, "").state
	if st == nil || st.Old != "v1" || st.New != "v3" || st.Retired != "v2" || st.Share() != 20 {
		t.Fatalf("after v3: %+v; want v1 -> v3 at 20%%, v2 retired", st)
	}
	if w1, w2, w3 := weightOf(c, "web-v1"), weightOf(c, "web-v2"), weightOf(c, "web-v3"); w1 != 8000 || w2 != 0 || w3 != 2000 {
		t.Errorf("weights %d/%d/%d, want 8000/0/2000", w1, w2, w3)
	}
}

// A finding of the second hostile review (R4f, R15): nothing bounded the
// bytes of the fleet's record of rollouts when it was written, only when
// it was read back (1 MiB). A tenant's units make entries of their own
// (a hosts key up to 256 bytes, caddy.version values of 128 bytes that
// JSON writes 6 bytes a `<`): 1,000 of them passed 1 MiB, the next
// reader refused the record as huge, and the next writer replaced it
// with its own entries alone: every other unit's rollout was forgotten,
// and a version rolled back for its errors began rolling out again. A
// write that would pass the bound is now refused (the new entry is
// refused, visibly, as on a full record), and the record read stays.
func TestRollout_R4f_a_record_filled_past_its_bytes_forgets_no_rollback(t *testing.T) {
	storage := &fleet.Memory{}
	v1, v2 := rolloutInstance("v1", 0), rolloutInstance("v2", 1)
	rr, c := rolloutCaddy(t, "victim", storage, v1)
	t0 := time.Now()
	rr.look(t0)
	c.Replace([]catalog.Instance{v1, v2})
	rr.look(t0.Add(time.Second))
	if err := rr.s.RolloutCommand("abort", "", "test"); err != nil {
		t.Fatal(err)
	}
	if st := un(rr, "").state; st == nil || st.Verdict != rollout.RolledBack || weightOf(c, "web-v2") != 0 {
		t.Fatalf("after abort: %+v, v2 weight %d", st, weightOf(c, "web-v2"))
	}
	// The tenant's deciders, one entry each, as decideUnit writes them.
	big := strings.Repeat("<", rollout.MaxVersionLen)
	written := 0
	for i := range 400 { // about 2.9 kB each: past 1 MiB
		hosts := fmt.Sprintf("t%04d-%s.example", i, strings.Repeat("a", 200))
		_, err := rr.s.conn.UpdateRollouts(t.Context(), func(raw []byte) ([]byte, error) {
			rec, _, err := rollout.Decode(raw, t0)
			if err != nil {
				return nil, err
			}
			st := rollout.Begin(big+"1", big+"2", rollout.Default(), t0)
			st.Owner, st.Claimed, st.Retired = "tenant", t0, big+"0"
			if err := rec.Put(unitKey(rr.name, hosts), st); err != nil {
				return nil, err
			}
			return rec.Encode()
		})
		if err != nil {
			break // refused, as a decider's is
		}
		written++
	}
	raw, _ := rr.s.conn.LoadRollouts(t.Context())
	t.Logf("the tenant wrote %d entries, the record is %d bytes", written, len(raw))
	rr.look(t0.Add(10 * time.Second)) // past half the claim: the victim renews
	if st := un(rr, "").state; st == nil || st.Verdict != rollout.RolledBack || st.New != "v2" || weightOf(c, "web-v2") != 0 {
		t.Errorf("after the tenant filled the record: %+v, v2 weight %d; want v2 still rolled back at 0", st, weightOf(c, "web-v2"))
	}
}

// lockCounting is a storage that counts its locks and reads of the
// record of rollouts.
type lockCounting struct {
	*fleet.Memory
	locks, reads atomic.Int64
}

func (s *lockCounting) Lock(context.Context, string) error   { s.locks.Add(1); return nil }
func (s *lockCounting) Unlock(context.Context, string) error { return nil }
func (s *lockCounting) Load(ctx context.Context, key string) ([]byte, error) {
	if strings.Contains(key, "rollouts") {
		s.reads.Add(1)
	}
	return s.Memory.Load(ctx, key)
}

// A finding of the second hostile review (R4f, R15): a unit with
// caddy.rollout and one version has nothing to roll out, yet at each
// change of the daemon's catalog (any instance's event: another tenant's
// health checks, starts and stops) its route read the fleet's record
// twice (up to 1 MiB of JSON) and took the storage's lock, up to five
// times a second per route and Caddy: the steady state of every route
// deployed with caddy.rollout=true, and a cost a tenant raises by
// churning containers and growing the record. Such a unit now costs no
// storage call.
func TestRollout_R4f_one_version_costs_no_storage_call(t *testing.T) {
	storage := &lockCounting{Memory: &fleet.Memory{}}
	v1 := rolloutInstance("v1", 0)
	other := catalog.Instance{ID: "o", Name: "other", State: catalog.StateRunning, Labels: map[string]string{"app": "other"},
		Networks: []catalog.Attachment{{Network: "default", Address: "10.0.1.1"}}}
	rr, c := rolloutCaddy(t, "x", storage, v1)
	t0 := time.Now()
	for i := range 20 {
		other.Labels["n"] = strconv.Itoa(i) // another tenant's instance changes
		c.Replace([]catalog.Instance{v1, other})
		rr.look(t0.Add(time.Duration(i) * time.Second))
	}
	if l, r := storage.locks.Load(), storage.reads.Load(); l != 0 || r != 0 {
		t.Errorf("20 catalog changes with one version of a unit: %d locks and %d reads of the record; want none", l, r)
	}
	// A second version still begins a rollout at once.
	c.Replace([]catalog.Instance{v1, rolloutInstance("v2", 1), other})
	rr.look(t0.Add(21 * time.Second))
	if st := un(rr, "").state; st == nil || st.New != "v2" || st.Share() != 20 {
		t.Errorf("then v2: %+v", st)
	}
}
