package heal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// fakeActions records the restarts asked for.
type fakeActions struct {
	mu       sync.Mutex
	restarts []string
	interval time.Duration
	err      error
}

func (f *fakeActions) Restart(_ context.Context, id string, labels map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := labels[catalog.LabelHeal]; !ok {
		return errors.New("not labelled")
	}
	f.restarts = append(f.restarts, id)
	return f.err
}

func (f *fakeActions) HealthInterval(context.Context, string) (time.Duration, error) {
	return f.interval, nil
}

func (f *fakeActions) Denied(error) bool { return false }

func (f *fakeActions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.restarts)
}

// clock is a stepped clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) step(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

type rig struct {
	t    *testing.T
	h    *Healer
	fake *fakeActions
	clk  *clock
	logs *observer.ObservedLogs
	busy map[string]bool
}

func newRig(t *testing.T, ledger *Ledger, maxRestarts int) *rig {
	core, logs := observer.New(zapcore.InfoLevel)
	r := &rig{t: t, fake: &fakeActions{}, clk: &clock{t: time.Unix(1_000_000, 0)}, logs: logs, busy: map[string]bool{}}
	if ledger == nil {
		ledger = NewLedger()
	}
	r.h = newHealer(t.Context(), r.fake, ledger, Options{
		Logger: zap.New(core), MaxRestarts: maxRestarts, Clock: r.clk.now,
		Busy: func(id string) bool { return r.busy[id] },
	})
	return r
}

// look looks at the containers now and waits for the calls it made.
func (r *rig) look() time.Duration {
	next := r.h.look(r.clk.now())
	r.h.wg.Wait()
	return next
}

func container(id, host, heal string, health catalog.Health) catalog.Instance {
	labels := map[string]string{catalog.LabelHost: host}
	if heal != "" {
		labels[catalog.LabelHeal] = heal
	}
	return catalog.Instance{ID: id, Name: "app-" + id, Labels: labels, State: catalog.StateRunning, Health: health}
}

// A container labelled caddy.heal=30s is restarted once it has been
// unhealthy 30 s, not before, with one Info line naming it, how long it
// was unhealthy, the attempt and the next backoff.
func TestHeal_R1e_restarts_after_label(t *testing.T) {
	r := newRig(t, nil, 0)
	r.h.Observe(container("a", "shop.example.com", "30s", catalog.HealthHealthy))
	r.clk.step(time.Minute)
	r.h.Observe(container("a", "shop.example.com", "30s", catalog.HealthUnhealthy))
	r.clk.step(29 * time.Second)
	if next := r.look(); r.fake.count() != 0 || next != time.Second {
		t.Fatalf("after 29 s unhealthy: %d restarts, next look in %s; want 0, 1s", r.fake.count(), next)
	}
	r.clk.step(time.Second)
	r.look()
	if r.fake.count() != 1 {
		t.Fatalf("after 30 s unhealthy: %d restarts, want 1", r.fake.count())
	}
	lines := r.logs.FilterMessage("restarting unhealthy container").All()
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["instance"] != "app-a" || f["unhealthy_for"] != 30*time.Second || f["attempt"] != int64(1) || f["next_backoff"] != time.Minute {
		t.Errorf("log line %v", f)
	}
	// A healthy container, and one without the label, are never
	// restarted.
	r.h.Observe(container("b", "b.example.com", "30s", catalog.HealthHealthy))
	r.h.Observe(container("c", "c.example.com", "", catalog.HealthUnhealthy))
	r.clk.step(time.Hour)
	r.look()
	if r.fake.count() != 1 {
		t.Errorf("%d restarts, want still 1", r.fake.count())
	}
}

// brokenAgain reports a restarted container starting, then unhealthy
// again at once, as the Engine's events would.
func (r *rig) brokenAgain(inst catalog.Instance) {
	inst.Health = catalog.HealthStarting
	r.h.Observe(inst)
	inst.Health = catalog.HealthUnhealthy
	r.h.Observe(inst)
}

// A container that stays broken is restarted with a backoff that doubles
// from the label's value (30 s: gaps of at least 1 min, 2 min, 4 min,
// ...) and at most heal_max_restarts times an hour: one warning when it
// reaches that, and the next restart an hour after the oldest.
func TestHeal_R1e_backoff_grows_and_cap(t *testing.T) {
	r := newRig(t, nil, 4)
	inst := container("a", "shop.example.com", "30s", catalog.HealthUnhealthy)
	r.h.Observe(inst)
	start := r.clk.now()
	var at []time.Duration
	for r.clk.now().Sub(start) < 70*time.Minute {
		n := r.fake.count()
		r.look()
		if r.fake.count() > n {
			at = append(at, r.clk.now().Sub(start))
			r.brokenAgain(inst)
		}
		r.clk.step(time.Second)
	}
	want := []time.Duration{30 * time.Second, 90 * time.Second, 210 * time.Second, 450 * time.Second, 60*time.Minute + 30*time.Second}
	if len(at) != len(want) {
		t.Fatalf("restarts at %v, want %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("restarts at %v, want %v", at, want)
		}
	}
	if warns := r.logs.FilterMessage("container unhealthy, not restarted: heal_max_restarts reached").Len(); warns != 1 {
		t.Errorf("%d cap warnings, want 1", warns)
	}
}

// backoff doubles from the base up to maxBackoff, never overflowing.
func TestHeal_R1e_backoff(t *testing.T) {
	for _, c := range []struct {
		base time.Duration
		n    int
		want time.Duration
	}{
		{30 * time.Second, 1, time.Minute}, {30 * time.Second, 3, 4 * time.Minute},
		{30 * time.Second, 10, maxBackoff}, {24 * time.Hour, 1, maxBackoff}, {time.Second, 1000, maxBackoff},
	} {
		if got := backoff(c.base, c.n); got != c.want {
			t.Errorf("backoff(%s, %d) = %s, want %s", c.base, c.n, got, c.want)
		}
	}
}

// Of two unhealthy instances of one route (a shared host), one is
// restarted at a time: the other waits for the first's next verdict.
func TestHeal_R1e_one_restart_per_route(t *testing.T) {
	r := newRig(t, nil, 0)
	a := container("a", "shop.example.com", "10s", catalog.HealthUnhealthy)
	b := container("b", "www.example.com,SHOP.example.com", "10s", catalog.HealthUnhealthy)
	other := container("c", "other.example.com", "10s", catalog.HealthUnhealthy)
	for _, inst := range []catalog.Instance{a, b, other} {
		r.h.Observe(inst)
	}
	r.clk.step(10 * time.Second)
	r.look()
	if n := r.fake.count(); n != 2 {
		t.Fatalf("%d restarts, want 2 (one of shop.example.com, and other.example.com)", n)
	}
	r.clk.step(time.Minute) // the first one's call returned, no verdict yet
	r.look()
	if n := r.fake.count(); n != 2 {
		t.Fatalf("%d restarts while the first of the route restarts, want 2", n)
	}
	first := r.fake.restarts[0]
	if first == "c" {
		first = r.fake.restarts[1]
	}
	healed := a
	if first == "b" {
		healed = b
	}
	healed.Health = catalog.HealthStarting
	r.h.Observe(healed)
	healed.Health = catalog.HealthHealthy
	r.h.Observe(healed)
	r.look()
	if n := r.fake.count(); n != 3 {
		t.Fatalf("%d restarts once the first is healthy again, want 3", n)
	}
}

// A container scale to zero is waking or putting on standby is left to it
// (R5).
func TestHeal_R1e_not_while_scale_to_zero_acts(t *testing.T) {
	r := newRig(t, nil, 0)
	r.h.Observe(container("a", "shop.example.com", "10s", catalog.HealthUnhealthy))
	r.busy["a"] = true
	r.clk.step(time.Minute)
	if next := r.look(); r.fake.count() != 0 || next != busyRecheck {
		t.Fatalf("%d restarts, next look in %s, want 0, %s", r.fake.count(), next, busyRecheck)
	}
	r.busy["a"] = false
	r.look()
	if r.fake.count() != 1 {
		t.Fatalf("%d restarts, want 1", r.fake.count())
	}
}

// caddy.heal=3 is three times the health check's interval.
func TestHeal_R1e_count_is_checks(t *testing.T) {
	r := newRig(t, nil, 0)
	r.fake.interval = 10 * time.Second
	r.h.Observe(container("a", "shop.example.com", "3", catalog.HealthUnhealthy))
	r.look() // asks the interval
	r.clk.step(29 * time.Second)
	r.look()
	if r.fake.count() != 0 {
		t.Fatalf("restarted after 29 s of a 3 × 10 s count")
	}
	r.clk.step(time.Second)
	r.look()
	if r.fake.count() != 1 {
		t.Fatalf("%d restarts after 30 s, want 1", r.fake.count())
	}
}

// A bad value is warned about once per value, naming the label and the
// container, and the container is not healed.
func TestHeal_R1e_bad_label(t *testing.T) {
	r := newRig(t, nil, 0)
	bad := []string{"soon", "0", "-3", "500ms", "1001", "25h", strings.Repeat("9", 40) + "s"}
	for i, v := range bad {
		for range 2 {
			r.h.Observe(container(string(rune('a'+i)), "shop.example.com", v, catalog.HealthUnhealthy))
		}
	}
	r.h.Observe(container("z", "z.example.com", "soon", catalog.HealthUnhealthy)) // a value already warned about
	r.clk.step(48 * time.Hour)
	r.look()
	if r.fake.count() != 0 {
		t.Errorf("%d restarts of badly labelled containers", r.fake.count())
	}
	warns := r.logs.FilterMessage("label ignored: the container is not healed").All()
	if len(warns) != len(bad) {
		t.Fatalf("%d warnings, want %d", len(warns), len(bad))
	}
	for _, w := range warns {
		if err, _ := w.ContextMap()["error"].(string); !strings.Contains(err, catalog.LabelHeal) || w.ContextMap()["instance"] == "" {
			t.Errorf("warning %v does not name the label and the container", w.ContextMap())
		}
	}
}

// Two connections to one Engine share its ledger: one restart.
func TestHeal_R1e_shared_engine_restarts_once(t *testing.T) {
	ledger := NewLedger()
	r1, r2 := newRig(t, ledger, 0), newRig(t, ledger, 0)
	r2.clk = r1.clk
	r2.h.now = r1.clk.now
	inst := container("a", "shop.example.com", "10s", catalog.HealthUnhealthy)
	r1.h.Observe(inst)
	r2.h.Observe(inst)
	r1.clk.step(10 * time.Second)
	r1.look()
	r2.look()
	if n := r1.fake.count() + r2.fake.count(); n != 1 {
		t.Fatalf("%d restarts, want 1", n)
	}
}

// The sink hands the catalog every report, then the healer.
func TestHeal_R1e_sink(t *testing.T) {
	r := newRig(t, nil, 0)
	cat := catalog.New(catalog.Options{})
	s := Sink(cat, r.h)
	s.Replace([]catalog.Instance{container("a", "shop.example.com", "10s", catalog.HealthUnhealthy)})
	if r.h.count.Load() != 1 {
		t.Fatal("the healer does not track the listed container")
	}
	s.Delete("a")
	if r.h.count.Load() != 0 {
		t.Fatal("the healer still tracks the removed container")
	}
}

// Another tenant's 30 containers labelled with a victim's host and kept
// unhealthy hold the victim's restart back by the restart in progress at
// most: it comes within its label's time plus one restart slot. Each of
// theirs, once restarted, stays starting for almost restartWatch (the
// longest a restart holds its group) and turns unhealthy again, so that
// their restarts, one at a time, fill every hour. Three such victims,
// each with its own 30, so that a random pick among the due fails all
// but surely.
func TestHeal_R1e_other_tenants_unhealthy_containers_hold_a_restart_back_one_slot_at_most(t *testing.T) {
	r := newRig(t, nil, 0)
	hosts := []string{"shop.example.com", "bank.example.com", "mail.example.com"}
	others := map[string]catalog.Instance{}
	for g, host := range hosts {
		for i := range 30 {
			inst := container(fmt.Sprintf("x%d-%02d", g, i), host, "1s", catalog.HealthUnhealthy)
			others[inst.ID] = inst
			r.h.Observe(inst)
		}
		r.h.Observe(container(fmt.Sprintf("v%d", g), host, "30s", catalog.HealthHealthy))
	}
	const step = 2 * time.Second
	const slot = restartWatch - 2*step
	restartedAt := map[string]time.Time{}
	// look looks, and plays the other tenant's containers: starting once
	// restarted, unhealthy again a slot later.
	look := func() []string {
		n := r.fake.count()
		r.look()
		now := r.clk.now()
		for id, at := range restartedAt {
			if now.Sub(at) >= slot {
				delete(restartedAt, id)
				r.h.Observe(others[id])
			}
		}
		var victims []string
		for _, id := range r.fake.restarts[n:] {
			if inst, ok := others[id]; ok {
				inst.Health = catalog.HealthStarting
				r.h.Observe(inst)
				restartedAt[id] = now
			} else {
				victims = append(victims, id)
			}
		}
		return victims
	}
	start := r.clk.now()
	for r.clk.now().Sub(start) < 61*time.Minute {
		if v := look(); len(v) > 0 {
			t.Fatalf("%v restarted while healthy", v)
		}
		r.clk.step(step)
	}
	if n := r.fake.count(); n < 3*29 {
		t.Fatalf("%d restarts of the other tenant's containers in an hour, want about 90", n)
	}
	broke := r.clk.now()
	for g, host := range hosts {
		r.h.Observe(container(fmt.Sprintf("v%d", g), host, "30s", catalog.HealthUnhealthy))
	}
	restarted := map[string]time.Duration{}
	for r.clk.now().Sub(broke) < time.Hour && len(restarted) < len(hosts) {
		for _, id := range look() {
			restarted[id] = r.clk.now().Sub(broke)
		}
		r.clk.step(step)
	}
	within := 30*time.Second + restartWatch + step
	t.Logf("victims restarted after their verdict: %v", restarted)
	for g := range hosts {
		id := fmt.Sprintf("v%d", g)
		if at, ok := restarted[id]; !ok || at > within {
			t.Errorf("victim %s restarted %s after it turned unhealthy (restarted: %v), want within %s (its caddy.heal=30s and one restart slot)",
				id, at, ok, within)
		}
	}
}

// Of a group's due restarts, never restarted, the oldest due goes first:
// while one restart holds the group, five others fall due one after
// another; each, once the group is free, in that order.
func TestHeal_R1e_oldest_due_first(t *testing.T) {
	r := newRig(t, nil, 0)
	first := container("a", "shop.example.com", "1s", catalog.HealthUnhealthy)
	r.h.Observe(first)
	r.clk.step(time.Second)
	r.look()
	if r.fake.count() != 1 {
		t.Fatalf("%d restarts, want 1", r.fake.count())
	}
	// Due at 5, 10, 15, 20, 25 s from now: IDs against that order, the
	// spelling of the host varied as the catalog reads it (R2).
	spelling := []string{"shop.example.com", "SHOP.example.com", "shop.example.com.", " shop.example.com ", "www.example.com,shop.example.com"}
	var want []string
	for i := range 5 {
		id := string(rune('z' - i))
		want = append(want, id)
		r.h.Observe(container(id, spelling[i], fmt.Sprintf("%ds", 5*(i+1)), catalog.HealthUnhealthy))
	}
	for range 30 {
		r.clk.step(time.Second)
		r.look()
	}
	if r.fake.count() != 1 {
		t.Fatalf("%d restarts while the first holds the group, want 1", r.fake.count())
	}
	r.h.Observe(container("a", "shop.example.com", "1s", catalog.HealthHealthy))
	for range want {
		n := r.fake.count()
		r.look()
		if r.fake.count() != n+1 {
			t.Fatalf("restarts %v: want one more once the group is free", r.fake.restarts)
		}
		id := r.fake.restarts[n]
		r.h.Observe(container(id, "shop.example.com", "1s", catalog.HealthHealthy))
		r.clk.step(time.Second)
	}
	if got := r.fake.restarts[1:]; !slices.Equal(got, want) {
		t.Fatalf("restarted in order %v, want the oldest due first: %v", got, want)
	}
}

// A container restarted, then removed while no event said so, leaves the
// Engine's ledger at the next full listing.
func TestHeal_R1e_listing_forgets_removed_containers(t *testing.T) {
	r := newRig(t, nil, 0)
	r.h.Observe(container("a", "shop.example.com", "1s", catalog.HealthUnhealthy))
	r.clk.step(time.Second)
	r.look()
	r.h.Observe(container("a", "shop.example.com", "1s", catalog.HealthHealthy)) // its verdict ends the restart
	if r.fake.count() != 1 || len(r.h.ledger.records) != 1 {
		t.Fatalf("%d restarts, %d records; want 1, 1", r.fake.count(), len(r.h.ledger.records))
	}
	r.h.Replace(nil)
	if n := len(r.h.ledger.records); n != 0 {
		t.Fatalf("%d records after a listing without the container, want 0", n)
	}
}

// R13e: each restart's answer is told to Options.Restarted, with the
// container, for the lifecycle event.
func TestHeal_R13e_restart_told(t *testing.T) {
	core, _ := observer.New(zapcore.InfoLevel)
	fake, clk := &fakeActions{}, &clock{t: time.Unix(1_000_000, 0)}
	var mu sync.Mutex
	var told []string
	h := newHealer(t.Context(), fake, NewLedger(), Options{Logger: zap.New(core), Clock: clk.now,
		Restarted: func(inst catalog.Instance, result string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, inst.Name+" "+result)
		}})
	h.Observe(container("a", "shop.example.com", "30s", catalog.HealthUnhealthy))
	clk.step(time.Minute)
	h.look(clk.now())
	h.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != "app-a "+ResultRestarted {
		t.Errorf("told %q, want [\"app-a restarted\"]", told)
	}
}
