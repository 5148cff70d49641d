package standby

import (
	"context"
	"fmt"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"go.uber.org/zap"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R5k, a hostile tenant: another tenant copies the victim's Compose
// project label onto catalog.MaxDependencies decoys named to sort before
// the victim's own dependency, labelled to match the victim's
// caddy.depends_on. The victim's app is up; its own dependency must stay
// up with it.
func TestStandby_R5k_decoys_do_not_push_out_a_dependency(t *testing.T) {
	openFinding(t)
	insts := []catalog.Instance{
		member("app", catalog.StateRunning, project("victim", catalog.LabelDependsOn, "role=db")),
		member("zdb", catalog.StateRunning, project("victim", "role", "db",
			catalog.LabelHost, "zdb", catalog.LabelStandbyAfter, "300ms")),
		member("canary", catalog.StateRunning, project("other",
			catalog.LabelHost, "canary", catalog.LabelStandbyAfter, "300ms")),
	}
	for i := range catalog.MaxDependencies {
		insts = append(insts, member(fmt.Sprintf("adecoy%02d", i), catalog.StateRunning, project("victim", "role", "db")))
	}
	p := newPoolCase(t, insts...)
	snap := p.cat.Snapshot()
	for _, name := range []string{"zdb", "canary"} {
		ts := snap.Targets(nil, catalog.Route{Port: 8080}, name)
		if len(ts) != 1 {
			t.Fatalf("%s: targets %v, want itself", name, ts)
		}
		p.w.Routed(ts[0].Activity, ts[0].Dial)
	}
	stopped := func(id string) bool {
		return slices.ContainsFunc(p.callList(), func(c string) bool { return c == "stop "+id })
	}
	testkit.Eventually(t, 10*time.Second, "the canary on standby", func() bool { return stopped("id-canary") })
	var stops []string
	for _, c := range p.callList() {
		if strings.HasPrefix(c, "stop ") {
			stops = append(stops, c)
		}
	}
	if stopped("id-zdb") {
		t.Fatalf("the victim's own dependency went on standby while its app is up (stops %v): "+
			"%d decoys in its project, named before it, took its place", stops, catalog.MaxDependencies)
	}
}

// R5m, a hostile tenant: n instances with caddy.standby_after 1s (a lease
// every second each), each used every second, make this Caddy write n
// leases a second to the fleet's storage: the calls grow with the
// tenant's instances, with no bound of the Caddy's own.
func TestFleet_R5m_tenant_instances_storage_calls(t *testing.T) {
	openFinding(t)
	for _, n := range []int{10, 100, 1000} {
		cat := catalog.New(catalog.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		eng := NewEngine(&fakeActions{then: func(string, string) error { return nil }})
		w := Join(ctx, eng, cat, zap.NewNop(), Options{})
		fl := fleet.New(fleet.Self{ID: "caddy"})
		var stores atomic.Int64
		fl.SetHooks(fleet.Hooks{Call: func(op string) {
			if op == "store" {
				stores.Add(1)
			}
		}})
		fl.SetStorage(&fleet.Memory{})
		eng.ShareThrough(fl, zap.NewNop(), nil)
		insts := make([]catalog.Instance, n)
		for i := range insts {
			in := sleeperFor(fmt.Sprintf("t%04d", i), catalog.StateRunning)
			in.Labels[catalog.LabelStandbyAfter] = "1s"
			insts[i] = in
		}
		cat.Replace(insts)
		var acts []*catalog.Activity
		snap := cat.Snapshot()
		for i := range insts {
			ts := snap.Targets(nil, catalog.Route{Port: 8080}, fmt.Sprintf("t%04d", i))
			w.Routed(ts[0].Activity, ts[0].Dial)
			acts = append(acts, ts[0].Activity)
		}
		start := time.Now()
		for time.Since(start) < 3*time.Second {
			for _, a := range acts {
				a.Touch(time.Now())
			}
			time.Sleep(100 * time.Millisecond)
		}
		got := stores.Load()
		t.Logf("%d instances, standby_after 1s, used all along: %d lease writes in %v (%.0f/s)", n, got,
			time.Since(start).Round(time.Millisecond), float64(got)/time.Since(start).Seconds())
		cancel()
		w.Close()
		_ = eng.Destruct()
	}
}

// openFinding skips a hostile tenant's attack that still succeeds (issue
// 42's tenant review: the report says where and why it is not fixed
// here) unless DICER_OPEN_FINDINGS is set, so that it can be run at will.
func openFinding(t *testing.T) {
	t.Helper()
	if os.Getenv("DICER_OPEN_FINDINGS") == "" {
		t.Skip("an open finding of the tenant review; set DICER_OPEN_FINDINGS=1 to run it")
	}
}
