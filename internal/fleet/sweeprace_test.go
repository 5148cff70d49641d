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
