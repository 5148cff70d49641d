package connection

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// sweptBy runs a connection's sweeps of the lease folders on a clock of
// its own, from t0, as sweepLeases does (sweepStep, woken when it says),
// until the folders left are keep or the clock passes t0+horizon; it
// returns when that was (zero: never) and when the sweeps wake next.
// before, if set, runs before each step.
func sweptBy(t *testing.T, sweeper *fleet.Fleet, s fleet.Storage, t0 time.Time, horizon time.Duration, keep int, before func(step int)) (at, next time.Time) {
	t.Helper()
	ctx := context.Background()
	folders := func() int {
		dirs, err := s.List(ctx, "dicer/fleet/leases", false)
		if errors.Is(err, fs.ErrNotExist) {
			return 0
		}
		if err != nil {
			return -1 // the storage away: not known
		}
		return len(dirs)
	}
	now, full := t0, t0
	for step := 0; !now.After(t0.Add(horizon)); step++ {
		if before != nil {
			before(step)
		}
		var wake time.Time
		full, wake = sweepStep(ctx, sweeper, now, full, zap.NewNop())
		if folders() == keep {
			return now, wake
		}
		if !wake.After(now) {
			t.Fatalf("step %d at %v: woken again at %v", step, now, wake)
		}
		now = wake
	}
	return time.Time{}, time.Time{}
}

// R5m, R15: the lease folders of instances gone from the daemon whose
// removal failed (the storage was away as they went), each with a lease
// from the future (its writer's clock runs ahead), go within seconds of
// the first sweep that reads them: the sweep after one that read a lease
// from the future still holding its lease time comes in a second, not 10
// minutes later, so that a sweep is there when it stops holding. A live
// lease of a Caddy in time stays, and once only it is left the sweeps
// are sweepEvery apart again.
func TestFleet_R5m_leases_from_the_future_of_gone_instances_go_within_seconds(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := &fleet.Memory{}
	ahead, live, sweeper := fleet.New(fleet.Self{ID: "ahead"}), fleet.New(fleet.Self{ID: "live"}), fleet.New(fleet.Self{ID: "sweeper"})
	for _, f := range []*fleet.Fleet{ahead, live, sweeper} {
		f.SetStorage(s)
	}
	var calls atomic.Int64
	sweeper.SetHooks(fleet.Hooks{Call: func(string) { calls.Add(1) }})
	skew := 5 * time.Minute
	for i := range 50 {
		at := t0.Add(skew)
		if err := ahead.Publish(ctx, fmt.Sprintf("gone-%d", i), fleet.Lease{LastUse: at, Expires: at.Add(fleet.LeaseTTL(fleet.LeaseEvery(3 * time.Second)))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := live.Publish(ctx, "live", fleet.Lease{LastUse: t0, Expires: t0.Add(time.Minute), Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A sweep reads a lease from the future as holding one lease time
	// (that of an unknown standby_after) from its first read.
	bound := fleet.LeaseTTL(fleet.LeaseEvery(0)) + 2*time.Second
	at, next := sweptBy(t, sweeper, s, t0, time.Hour, 1, nil)
	switch {
	case at.IsZero():
		t.Fatalf("the gone instances' folders still there an hour after the first sweep")
	case at.Sub(t0) > bound:
		t.Errorf("the gone instances' folders went %v after the first sweep read them, want within %v", at.Sub(t0), bound)
	}
	// Their removal costs a few calls each (load, delete, list and
	// delete the folder), not sweeps of the whole tree every second: one
	// sweep (a list of the root, a list and a load per folder) and the
	// removals; the next sweep comes sweepEvery after the first.
	if max := int64(1 + 2*51 + 4*50); calls.Load() > max {
		t.Errorf("%d storage calls to remove 50 leases from the future, want at most %d", calls.Load(), max)
	}
	if !next.Equal(t0.Add(sweepEvery)) {
		t.Errorf("with only a live lease left, the sweeps wake at %v, want %v (sweepEvery after the first)", next.Sub(t0), sweepEvery)
	}
}

// R5m, R15: a sweep that fails (the storage away for a moment) is tried
// again within sweepRetry, not sweepEvery: the dead leases of instances
// gone while it was away go within seconds of its return.
func TestFleet_R5m_a_failed_sweep_comes_again_within_seconds(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := &fleet.Memory{}
	dead, sweeper := fleet.New(fleet.Self{ID: "dead"}), fleet.New(fleet.Self{ID: "sweeper"})
	dead.SetStorage(s)
	sweeper.SetStorage(s)
	for i := range 20 {
		if err := dead.Publish(ctx, fmt.Sprintf("gone-%d", i), fleet.Lease{LastUse: t0.Add(-time.Hour), Expires: t0.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	away := errors.New("the storage is away")
	at, _ := sweptBy(t, sweeper, s, t0, time.Hour, 0, func(step int) {
		if step == 0 {
			s.Fail.Store(&away)
		} else {
			s.Fail.Store(nil)
		}
	})
	if bound := sweepRetry + 2*time.Second; at.IsZero() || at.Sub(t0) > bound {
		t.Errorf("the dead leases went %v after a sweep failed (zero: not within an hour), want within %v", at.Sub(t0), bound)
	}
}
