package connection

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// slowStorage is a fleet.Memory whose every call takes a round trip of
// a remote storage (Redis, Consul), counted.
type slowStorage struct {
	fleet.Memory
	rtt   time.Duration
	calls atomic.Int64
}

// wait is one round trip, or ctx's error if it ends first (as a remote
// storage's client returns).
func (s *slowStorage) wait(ctx context.Context) error {
	s.calls.Add(1)
	select {
	case <-time.After(s.rtt):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowStorage) Store(ctx context.Context, k string, v []byte) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Memory.Store(ctx, k, v)
}

func (s *slowStorage) Load(ctx context.Context, k string) ([]byte, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Memory.Load(ctx, k)
}

func (s *slowStorage) Delete(ctx context.Context, k string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Memory.Delete(ctx, k)
}

func (s *slowStorage) List(ctx context.Context, d string, r bool) ([]string, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Memory.List(ctx, d, r)
}

// R5j, R5m, a hostile tenant: n pool instances (caddy.soft_limit) with a
// request in flight each, on a storage with a 1 ms round trip. A pass of
// the load sharing writes and reads each (2 calls), one after another,
// within loadEvery: at 1000 it runs out of time, fails (every second,
// the storage kept busy all along), and the instances it had not reached
// (the catalog's map order: about half, another tenant's among them)
// keep the load last read, here none though another Caddy says 5.
func TestFleet_R5j_tenant_pool_instances_starve_anothers_load(t *testing.T) {
	if os.Getenv("DICER_OPEN_FINDINGS") == "" {
		t.Skip("an open finding of the tenant review; set DICER_OPEN_FINDINGS=1 to run it")
	}
	for _, n := range []int{10, 300, 1000} {
		storage := &slowStorage{rtt: time.Millisecond}
		other := fleet.New(fleet.Self{ID: "caddy-b"})
		other.SetStorage(&storage.Memory)
		now := time.Now()
		if err := other.Publish(context.Background(), "id-zz-victim", fleet.Lease{LastUse: now, InFlight: 5, Expires: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		c := fleetConn(t, "caddy-a", storage)
		pool := map[string]string{catalog.LabelHost: "h", catalog.LabelSoftLimit: "1", catalog.LabelStandbyAfter: "1h"}
		var insts []catalog.Instance
		for i := range n {
			insts = append(insts, catalog.Instance{ID: fmt.Sprintf("id-a%04d", i), Name: fmt.Sprintf("a%04d", i), State: catalog.StateRunning, Labels: pool})
		}
		insts = append(insts, catalog.Instance{ID: "id-zz-victim", Name: "zz-victim", State: catalog.StateRunning, Labels: pool})
		c.catalog.Replace(insts)
		sleepers := c.catalog.Sleepers(nil)
		var victim *catalog.Activity
		for _, sl := range sleepers {
			if sl.ID == "id-zz-victim" {
				sl.Activity.Touch(now)
				victim = sl.Activity
			} else {
				sl.Activity.Begin() // a request of the tenant's in flight
			}
		}
		start, before := time.Now(), storage.calls.Load()
		err := c.shareLoad(c.fleet, sleepers, map[string]int{})
		took := time.Since(start)
		load := victim.Load() // none of its own in flight: the fleet's alone
		t.Logf("%d pool instances of the tenant: one pass took %v, %d storage calls, error %v; the victim's fleet load %d (want 5)",
			n, took.Round(time.Millisecond), storage.calls.Load()-before, err != nil, load)
		if load != 5 {
			t.Errorf("%d instances of another tenant: the victim's fleet load read %d, want 5", n, load)
		}
	}
}
