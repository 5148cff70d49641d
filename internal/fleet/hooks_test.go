package fleet

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// heard is what a Fleet's hooks heard.
type heard struct {
	mu      sync.Mutex
	calls   map[string]int
	refused map[string]int
	logs    *observer.ObservedLogs
}

func listen(f *Fleet) *heard {
	core, logs := observer.New(zapcore.InfoLevel)
	h := &heard{calls: map[string]int{}, refused: map[string]int{}, logs: logs}
	f.SetHooks(Hooks{
		Logger:  zap.New(core),
		Call:    func(op string) { h.mu.Lock(); h.calls[op]++; h.mu.Unlock() },
		Refused: func(reason string) { h.mu.Lock(); h.refused[reason]++; h.mu.Unlock() },
	})
	return h
}

func (h *heard) count(m map[string]int, k string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return m[k]
}

// R5m: leases from the future and corrupt ones are counted once per
// version (Hooks.Refused) and warned once per writer, however often they
// are read.
func TestFleet_R5m_refused_leases_counted_and_warned_once(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	reader := New(Self{ID: "reader"})
	h := listen(reader)
	reader.SetStorage(s)
	ahead := New(Self{ID: "ahead"})
	ahead.SetStorage(s)
	_ = ahead.Publish(ctx, "id", Lease{LastUse: t0.Add(time.Hour), Expires: t0.Add(time.Hour)})
	absurd := New(Self{ID: "absurd"})
	absurd.SetStorage(s)
	_ = absurd.Publish(ctx, "id", Lease{LastUse: t0, InFlight: 1 << 20, Expires: t0.Add(time.Second)})
	_ = s.Store(ctx, leaseDir("id")+"/garbage", []byte("{not json"))
	for i := range 10 {
		_, _ = reader.HeldUntil(ctx, "id", 3*time.Second, t0.Add(time.Duration(i)*time.Second))
		n, _ := reader.OthersInFlight(ctx, "id", 0, t0.Add(time.Duration(i)*time.Second))
		if n != 0 {
			t.Fatalf("refused leases said %d in flight", n)
		}
	}
	if n := h.count(h.refused, "future"); n != 1 {
		t.Errorf("future: counted %d, want 1", n)
	}
	if n := h.count(h.refused, "corrupt"); n != 2 {
		t.Errorf("corrupt: counted %d, want 2 (absurd count, unreadable)", n)
	}
	if n := h.logs.FilterMessageSnippet("refused").Len() + h.logs.FilterMessageSnippet("dated ahead").Len(); n != 3 {
		t.Errorf("%d warnings, want one per writer (3)", n)
	}
	// A corrupt lease is removed once seen for RemoveGrace.
	_, _ = reader.HeldUntil(ctx, "id", 3*time.Second, t0.Add(RemoveGrace+maxTTL+time.Minute))
	if keys := leaseKeys(t, s, "id"); len(keys) != 0 {
		t.Errorf("refused leases kept: %v", keys)
	}
}

// R5m: a live Caddy with this Caddy's instance ID (they share a data
// directory) is warned of once.
func TestFleet_R5m_a_shared_data_directory_is_warned(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	one, two := New(Self{ID: "same"}), New(Self{ID: "same"})
	h := listen(two)
	one.SetStorage(s)
	two.SetStorage(s)
	now := time.Now()
	_ = one.Publish(ctx, "id", Lease{LastUse: now, InFlight: 1, Expires: now.Add(4 * time.Second)})
	for range 3 {
		_, _ = two.HeldUntil(ctx, "id", 3*time.Second, now)
	}
	if n := h.logs.FilterMessageSnippet("share a data directory").Len(); n != 1 {
		t.Errorf("%d warnings of a shared data directory, want 1", n)
	}
}

// R5m: ReleaseAll deletes every lease the process holds, and only those.
func TestFleet_R5m_release_all(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	me, other := New(Self{ID: "me"}), New(Self{ID: "other"})
	me.SetStorage(s)
	other.SetStorage(s)
	for _, id := range []string{"a", "b", "swarm-service-x"} {
		_ = me.Publish(ctx, id, Lease{LastUse: t0, InFlight: 1, Expires: t0.Add(time.Hour)})
	}
	_ = other.Publish(ctx, "a", Lease{LastUse: t0, InFlight: 1, Expires: t0.Add(time.Hour)})
	if err := me.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "swarm-service-x"} {
		want := 0
		if id == "a" {
			want = 1
		}
		if n := len(leaseKeys(t, s, id)); n != want {
			t.Errorf("%s: %d leases left, want %d", id, n, want)
		}
	}
}

// R5m: in a file storage, Sweep removes the dead leases of folders no
// reader looks at (their instances went while no Caddy that leased them
// ran) and then the empty folders, SweepFolders folders a call; live
// leases stay. Storage calls are counted by op, the lock's too.
func TestFleet_R5m_sweep_removes_the_folders_of_gone_instances(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := &certmagic.FileStorage{Path: dir}
	writer, sweeper := New(Self{ID: "gone-caddy"}), New(Self{ID: "sweeper"})
	h := listen(sweeper)
	writer.SetStorage(s)
	sweeper.SetStorage(s)
	const gone = 100
	for i := range gone {
		_ = writer.Publish(ctx, "gone-"+string(rune('a'+i/26))+string(rune('a'+i%26)), Lease{LastUse: t0.Add(-time.Hour),
			Expires: t0.Add(-time.Hour), Until: t0.Add(-time.Hour)})
	}
	_ = writer.Publish(ctx, "live", Lease{LastUse: t0, Expires: t0.Add(time.Minute), Until: t0.Add(time.Hour)})
	folders := func() int {
		entries, _ := os.ReadDir(filepath.Join(dir, leasesRoot))
		return len(entries)
	}
	if folders() != gone+1 {
		t.Fatalf("%d folders, want %d", folders(), gone+1)
	}
	for sweep := 0; sweep < 2*(gone/SweepFolders+1)+2; sweep++ {
		before := h.count(h.calls, "list")
		if _, err := sweeper.Sweep(ctx, t0); err != nil {
			t.Fatal(err)
		}
		if lists := h.count(h.calls, "list") - before; lists > SweepFolders+1 {
			t.Fatalf("a sweep listed %d times, want at most %d", lists, SweepFolders+1)
		}
	}
	if n := folders(); n != 1 {
		t.Errorf("%d lease folders left, want the live one", n)
	}
	if n := len(leaseKeys(t, s, "live")); n != 1 {
		t.Errorf("the live lease: %d", n)
	}
	// The lock of a storage that has one is counted, and still found.
	if _, err := sweeper.UpdateSwitches(ctx, "docker x", func(*Switches) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if h.count(h.calls, "lock") != 1 || h.count(h.calls, "unlock") != 1 || h.count(h.calls, "store") != 1 {
		t.Errorf("calls %v", h.calls)
	}
}

// R5m: the Fleets of one process (its connections, its config loads)
// write as one Caddy: one's lease is the other's own, and no warning.
func TestFleet_R5m_one_process_is_one_Caddy(t *testing.T) {
	ctx := context.Background()
	s := &Memory{}
	self := Self{ID: "me", Process: NewProcess()}
	one, two := New(self), New(self)
	h := listen(two)
	one.SetStorage(s)
	two.SetStorage(s)
	now := time.Now()
	_ = one.Publish(ctx, "id", Lease{LastUse: now, InFlight: 1, Expires: now.Add(4 * time.Second)})
	if until, _ := two.HeldUntil(ctx, "id", 3*time.Second, now); !until.IsZero() {
		t.Errorf("its own process's lease held it until %v", until)
	}
	if n := h.logs.Len(); n != 0 {
		t.Errorf("%d log lines, want none", n)
	}
	if err := two.Release(ctx, "id"); err != nil || len(leaseKeys(t, s, "id")) != 0 {
		t.Errorf("released through the other Fleet: %v, %v left", err, leaseKeys(t, s, "id"))
	}
}
