package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// These tests use only what the fleet had before its leases were bounded
// (Publish, HeldUntil, Memory), so that they run against that code too.

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// leaseKeys is the leases stored on instance.
func leaseKeys(t *testing.T, s Storage, instance string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), leaseDir(instance), false)
	if err != nil {
		return nil
	}
	return keys
}

// staleFleet writes n dead leases on instance (Caddys that stopped an
// hour ago), from writers named before any live one.
func staleFleet(t *testing.T, s Storage, instance string, n int) {
	t.Helper()
	for i := range n {
		f := New(Self{ID: fmt.Sprintf("a-stale-%03d", i)})
		f.SetStorage(s)
		if err := f.Publish(context.Background(), instance, Lease{LastUse: t0.Add(-time.Hour), InFlight: 1,
			Expires: t0.Add(-time.Hour + 4*time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
}

// R5m: a live Caddy's lease is read past 64 stale ones (a reader stopped
// at the 64th key, in name order, and put the container on standby under
// 3 requests in flight).
func TestFleet_R5m_live_lease_read_past_64_stale(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	staleFleet(t, s, "id", 64)
	live, reader := New(Self{ID: "b-live"}), New(Self{ID: "c-reader"})
	live.SetStorage(s)
	reader.SetStorage(s)
	_ = live.Publish(ctx, "id", Lease{LastUse: t0.Add(-time.Minute), InFlight: 3, Expires: t0.Add(4 * time.Second)})
	until, err := reader.HeldUntil(ctx, "id", 3*time.Second, t0)
	if err != nil || !until.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("held until %v (%v), want the live lease's end %v", until, err, t0.Add(4*time.Second))
	}
}

// R5m: dead leases (past their end by RemoveGrace) are removed by any
// reader, at most 16 a read, until only the live ones are left.
func TestFleet_R5m_dead_leases_removed_by_readers(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	staleFleet(t, s, "id", 100)
	live, reader := New(Self{ID: "b-live"}), New(Self{ID: "c-reader"})
	live.SetStorage(s)
	reader.SetStorage(s)
	_ = live.Publish(ctx, "id", Lease{LastUse: t0, InFlight: 1, Expires: t0.Add(4 * time.Second)})
	before := len(leaseKeys(t, s, "id"))
	for read := 1; read <= 7; read++ {
		if _, err := reader.HeldUntil(ctx, "id", 3*time.Second, t0); err != nil {
			t.Fatal(err)
		}
		n := len(leaseKeys(t, s, "id"))
		if removed := before - n; removed > 16 {
			t.Fatalf("read %d removed %d leases, want at most 16", read, removed)
		}
		before = n
	}
	if keys := leaseKeys(t, s, "id"); len(keys) != 1 {
		t.Fatalf("%d leases left after 7 reads, want the live one: %v", len(keys), keys)
	}
	// Past the live lease's end and RemoveGrace, it goes too.
	_, _ = reader.HeldUntil(ctx, "id", 3*time.Second, t0.Add(4*time.Second+2*time.Minute))
	if keys := leaseKeys(t, s, "id"); len(keys) != 0 {
		t.Errorf("a dead lease kept: %v", keys)
	}
}

// R5m: a lease dated an hour ahead of the reader's clock (its writer's
// clock runs ahead, and it stopped) holds the container for one lease
// time from when the reader first read it, not for the whole skew; one
// dated 9999 with 2^20 requests in flight holds nothing.
func TestFleet_R5m_a_lease_from_the_future_holds_one_lease_time(t *testing.T) {
	ctx := context.Background()
	after := 3 * time.Second
	ttl := LeaseTTL(LeaseEvery(after))
	for name, l := range map[string]Lease{
		"an hour ahead": {LastUse: t0.Add(time.Hour), InFlight: 1, Expires: t0.Add(time.Hour + 4*time.Second)},
		"9999":          {LastUse: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), InFlight: 1 << 20, Expires: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(name, func(t *testing.T) {
			s := &Memory{}
			ahead, reader := New(Self{ID: "ahead"}), New(Self{ID: "reader"})
			ahead.SetStorage(s)
			reader.SetStorage(s)
			_ = ahead.Publish(ctx, "id", l)
			held := 0
			for check := range 12 { // every 5 min over 55 min
				now := t0.Add(time.Duration(check) * 5 * time.Minute)
				until, err := reader.HeldUntil(ctx, "id", after, now)
				if err != nil {
					t.Fatal(err)
				}
				if until.After(t0.Add(ttl)) {
					t.Errorf("check %d: held until %v, past one lease time from the first read (%v)", check, until, t0.Add(ttl))
				}
				if !until.IsZero() {
					held++
				}
			}
			if held > 1 {
				t.Errorf("held at %d of 12 checks over 55 min, want the first at most", held)
			}
		})
	}
}

// R5m: two Caddys that share a data directory share an instance ID; each
// still reads the other's lease (a lease is per process).
func TestFleet_R5m_two_processes_with_one_ID_see_each_other(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	one, two := New(Self{ID: "same"}), New(Self{ID: "same"})
	one.SetStorage(s)
	two.SetStorage(s)
	_ = one.Publish(ctx, "id", Lease{LastUse: t0, InFlight: 2, Expires: t0.Add(4 * time.Second)})
	_ = two.Publish(ctx, "id", Lease{LastUse: t0.Add(-time.Hour), Expires: t0.Add(-time.Hour)})
	if until, _ := two.HeldUntil(ctx, "id", 3*time.Second, t0); !until.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("the other process's lease held until %v, want %v", until, t0.Add(4*time.Second))
	}
	if until, _ := one.HeldUntil(ctx, "id", 3*time.Second, t0); !until.IsZero() {
		t.Errorf("its own lease held it until %v", until)
	}
}

// R5m, R15: a lease from the future is removed once it holds nothing (one
// lease time after its first read), and a sweep that removes a folder's
// last lease removes the folder in the same pass: leases of a Caddy with
// a clock ahead, on instances that come and go, do not pile up for the
// writer's whole skew.
func TestFleet_R5m_a_refused_lease_from_the_future_goes_within_a_lease_time(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	ahead, sweeper := New(Self{ID: "ahead"}), New(Self{ID: "sweeper"})
	ahead.SetStorage(s)
	sweeper.SetStorage(s)
	for i := range 10 {
		id := fmt.Sprintf("gone-%d", i)
		_ = ahead.Publish(ctx, id, Lease{LastUse: t0.Add(5 * time.Minute), Expires: t0.Add(5*time.Minute + 4*time.Second)})
	}
	if _, err := sweeper.Sweep(ctx, t0); err != nil { // the first look: each is seen, and holds for a lease time
		t.Fatal(err)
	}
	ttl := LeaseTTL(LeaseEvery(0))
	if _, err := sweeper.Sweep(ctx, t0.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	if dirs, err := s.List(ctx, leasesRoot, false); err == nil && len(dirs) != 0 {
		t.Errorf("%d lease folders one lease time (%v) after the first sweep saw them from the future, want 0: %v", len(dirs), ttl, dirs)
	}
}
