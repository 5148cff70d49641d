package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// R5m: HeldUntil is the latest of the other Caddys' last use plus
// standby_after and, for a lease with requests in flight that has not
// expired, its end; its own lease, an expired one's requests and a clock
// ahead hold nothing more; an unreadable storage is an error.
func TestFleetLease_R5m_held_until(t *testing.T) {
	ctx := context.Background()
	storage := &Memory{}
	a, b, c := New(Self{ID: "a"}), New(Self{ID: "b"}), New(Self{ID: "c"})
	for _, f := range []*Fleet{a, b, c} {
		f.SetStorage(storage)
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	after := 3 * time.Second
	if until, err := a.HeldUntil(ctx, "id", after, now); err != nil || !until.IsZero() {
		t.Fatalf("no lease: %v %v", until, err)
	}
	// a's own lease holds nothing for a.
	_ = a.Publish(ctx, "id", Lease{LastUse: now, InFlight: 1, Expires: now.Add(time.Hour)})
	if until, _ := a.HeldUntil(ctx, "id", after, now); !until.IsZero() {
		t.Errorf("its own lease held it until %v", until)
	}
	// b used it 1 s ago, idle: until then plus standby_after.
	_ = b.Publish(ctx, "id", Lease{LastUse: now.Add(-time.Second), Expires: now.Add(4 * time.Second)})
	if until, _ := a.HeldUntil(ctx, "id", after, now); !until.Equal(now.Add(2 * time.Second)) {
		t.Errorf("b's idle lease holds until %v, want +2s", until)
	}
	// c has a request in flight, lease to +4 s: until then.
	_ = c.Publish(ctx, "id", Lease{LastUse: now.Add(-10 * time.Second), InFlight: 1, Expires: now.Add(4 * time.Second)})
	if until, _ := a.HeldUntil(ctx, "id", after, now); !until.Equal(now.Add(4 * time.Second)) {
		t.Errorf("c's busy lease holds until %v, want +4s", until)
	}
	// Past c's lease (it died mid-request) and b's idle time: nothing.
	if until, _ := a.HeldUntil(ctx, "id", after, now.Add(5*time.Second)); !until.IsZero() {
		t.Errorf("expired leases hold until %v", until)
	}
	// A clock an hour ahead holds no longer than standby_after from now.
	_ = b.Publish(ctx, "id", Lease{LastUse: now.Add(time.Hour), Expires: now.Add(2 * time.Hour)})
	if until, _ := a.HeldUntil(ctx, "id", after, now); until.After(now.Add(4 * time.Second)) {
		t.Errorf("a clock ahead holds until %v", until)
	}
	down := errors.New("down")
	storage.Fail.Store(&down)
	if _, err := a.HeldUntil(ctx, "id", after, now); !errors.Is(err, down) {
		t.Errorf("unreadable storage: %v", err)
	}
}

// An instance ID that is not a plain name never becomes a path.
func TestFleetLease_keys_are_plain(t *testing.T) {
	for _, id := range []string{"../../etc/passwd", "a/b", "", strings.Repeat("x", 200), ".."} {
		if k := safeKey(id); strings.ContainsAny(k, "/\\") || k == ".." || k == "." || len(k) > 128 || k == "" {
			t.Errorf("%q: key %q", id, k)
		}
	}
	if safeKey("0123abc") != "0123abc" {
		t.Error("a plain ID changed")
	}
}

// LeaseEvery is a third of standby_after, between 1 s and a minute.
func TestFleetLease_every(t *testing.T) {
	for after, want := range map[time.Duration]time.Duration{time.Second: time.Second, 30 * time.Second: 10 * time.Second, time.Hour: time.Minute} {
		if got := LeaseEvery(after); got != want {
			t.Errorf("LeaseEvery(%v) = %v, want %v", after, got, want)
		}
	}
}
