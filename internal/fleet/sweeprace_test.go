package fleet

import (
	"context"
	"fmt"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"
)

// walkRace is a storage whose first List of the lease root fails as a
// file storage's does when a folder goes while it walks the root (another
// Caddy removed it): with ErrNotExist, though the root is there.
type walkRace struct {
	*Memory
	raced atomic.Bool
}

func (w *walkRace) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	if dir == leasesRoot && !w.raced.Swap(true) {
		return nil, fmt.Errorf("lstat %s/gone: %w", dir, fs.ErrNotExist)
	}
	return w.Memory.List(ctx, dir, recursive)
}

// R5m, R15: a sweep whose list of the lease folders fails because one
// went meanwhile still sweeps them (the list is tried again), instead of
// finding nothing and coming again 10 minutes later.
func TestFleet_R5m_a_folder_gone_while_the_sweep_lists_does_not_end_the_sweep(t *testing.T) {
	ctx := context.Background()
	s := &walkRace{Memory: &Memory{}}
	dead, sweeper := New(Self{ID: "dead"}), New(Self{ID: "sweeper"})
	dead.SetStorage(s)
	sweeper.SetStorage(s)
	for i := range 10 {
		_ = dead.Publish(ctx, fmt.Sprintf("gone-%d", i), Lease{LastUse: t0.Add(-time.Hour), Expires: t0.Add(-time.Hour)})
	}
	n, err := sweeper.Sweep(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("the sweep found no garbage among 10 folders of dead leases")
	}
	if dirs, err := s.Memory.List(ctx, leasesRoot, false); err == nil {
		t.Errorf("%d lease folders left after the sweep, want 0", len(dirs))
	}
}

// folderRace is a storage whose first List of one instance's lease folder
// fails as a file storage's does when a lease in it goes while it walks
// the folder: with ErrNotExist, though the folder and its live leases
// are there.
type folderRace struct {
	*Memory
	dir   string
	raced atomic.Bool
}

func (w *folderRace) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	if dir == w.dir && !w.raced.Swap(true) {
		return nil, fmt.Errorf("lstat %s/dead: %w", dir, fs.ErrNotExist)
	}
	return w.Memory.List(ctx, dir, recursive)
}

// R5m: a Caddy about to put an instance on standby whose list of the
// instance's leases fails because a dead lease went meanwhile still sees
// another Caddy's live lease (the list is tried again), instead of none:
// it would have stopped an instance the other Caddy was using.
func TestFleet_R5m_a_lease_gone_while_listed_hides_no_live_one(t *testing.T) {
	ctx := context.Background()
	s := &folderRace{Memory: &Memory{}, dir: leaseDir("web")}
	user, deciding := New(Self{ID: "user"}), New(Self{ID: "deciding"})
	user.SetStorage(s)
	deciding.SetStorage(s)
	if err := user.Publish(ctx, "web", Lease{LastUse: t0, InFlight: 1, Expires: t0.Add(4 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	until, err := deciding.HeldUntil(ctx, "web", 3*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !until.After(t0) {
		t.Errorf("held until %v: the other Caddy's live lease with a request in flight was not seen", until)
	}
}
