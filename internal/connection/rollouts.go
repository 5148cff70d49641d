package connection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

// What a route's rollout (R4f) needs of its connection: the fleet's record
// of rollouts, the runtime weights its shares become (R4c, R4e), its
// metric and its event. The decision itself is package rollout's, made by
// the root's upstream source.

// ErrNoFleet is UpdateRollouts' error when no storage is shared.
var ErrNoFleet = errors.New("no storage shared")

// FleetID is this Caddy's ID in the fleet, "" without one.
func (c *Conn) FleetID() string {
	if f := c.shared(); f != nil {
		return f.Self().ID
	}
	return ""
}

// UpdateRollouts changes the daemon's rollouts record under the storage's
// lock (fleet.UpdateRollouts); ErrNoFleet without a shared storage.
func (c *Conn) UpdateRollouts(ctx context.Context, change func(raw []byte) ([]byte, error)) ([]byte, error) {
	f := c.shared()
	if f == nil {
		return nil, ErrNoFleet
	}
	b, err := f.UpdateRollouts(ctx, c.daemonKey(), change)
	if err != nil {
		c.metrics.fleetErrors("write").Inc()
	}
	return b, err
}

// LoadRollouts reads the daemon's rollouts record; ErrNoFleet without a
// shared storage.
func (c *Conn) LoadRollouts(ctx context.Context) ([]byte, error) {
	f := c.shared()
	if f == nil {
		return nil, ErrNoFleet
	}
	return f.LoadRollouts(ctx, c.daemonKey())
}

// RolloutWeights gives the instances of want (by ID) their runtime
// weights, names[id] naming them for people: in a fleet through the
// switches record, which every Caddy applies within a second (R4e), only
// when one of them differs from the record; else in the catalog. It
// reports whether anything changed. A record that would hold over
// fleet.MaxWeightSwitches weights first loses the oldest weights of
// instances gone from the synced catalog, as an operator's weight makes
// room (R4e); when that is not enough, nothing is written and the error
// is fleet.ErrFull (wrapped).
func (c *Conn) RolloutWeights(want map[string]int, names map[string]string) (bool, error) {
	f := c.shared()
	if f == nil {
		changed := false
		for id, w := range want {
			if len(c.catalog.SetWeight(func(_ map[string]string, name string) bool { return name == names[id] }, w)) > 0 {
				changed = true
			}
		}
		return changed, nil
	}
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	same := true
	for id, w := range want {
		if have, ok := c.switches.weights[id]; !ok || have.Weight != w {
			same = false
			break
		}
	}
	if same {
		return false, nil
	}
	_, host, at := f.Stamp()
	now, synced := c.switches.clock(), c.synced()
	ctx, cancel := context.WithTimeout(c.runCtx, 10*time.Second)
	defer cancel()
	var written fleet.Switches
	raw, err := f.UpdateSwitches(ctx, c.daemonKey(), func(sw *fleet.Switches) error {
		if sw.Weights == nil {
			sw.Weights = map[string]fleet.WeightSwitch{}
		}
		lacked := map[string]bool{}
		c.catalog.Holding(maps.Keys(sw.Weights), func(id string, held bool) {
			if !held {
				lacked[id] = true
			}
		})
		for id, w := range want {
			sw.Weights[id] = fleet.WeightSwitch{Weight: w, Name: clip(names[id], fleet.MaxSwitchName), From: "rollout", Host: host, At: at}
		}
		// Room as for an operator's weight (R4e): the oldest weights of
		// instances gone from the synced catalog; else ErrFull, which
		// the rollout shows and waits on.
		_, err := sw.MakeRoom(now, func(id string) bool { return synced && lacked[id] })
		written = *sw
		return err
	})
	if errors.Is(err, fleet.ErrFull) {
		return false, err
	}
	if err != nil {
		c.metrics.fleetErrors("write").Inc()
		return false, fmt.Errorf("%w: %w", ErrFleetStorage, err)
	}
	c.switches.reader.Wrote(raw)
	c.adopt(written)
	return true, nil
}

// RolledBack counts a rollback of route and emits its event with data.
func (c *Conn) RolledBack(route string, data map[string]any) {
	metrics.rollbacks.WithLabelValues(c.kind, c.address, route).Inc()
	if c.events.Listens(lifecycle.RolledBack) {
		data["route"] = route
		c.events.Emit(lifecycle.RolledBack, lifecycle.Instance{}, data)
	}
}
