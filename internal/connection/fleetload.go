package connection

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// The fleet's load on a Dicer pool (R5j): on a daemon that wakes on
// connect, a pool grows by a connection to the next instance's published
// port when every routable instance is past its caddy.soft_limit; in a
// fleet, "past" counts the other Caddys' requests too. Every loadEvery,
// this Caddy leases each pool instance it has requests in flight to (and
// once more when they end), and reads the others' leases of each pool
// instance, whose sum the instance's Activity adds to its load. (Docker's
// pools share their load through internal/standby's leases, Swarm's
// services through the scaler's.)

// loadEvery is how often the load is written and read.
const loadEvery = time.Second

// shareLoadLoop shares the pools' load until the connection closes.
func (c *Conn) shareLoadLoop() {
	tick := time.NewTicker(loadEvery)
	defer tick.Stop()
	published := map[string]int{}
	var buf []catalog.Sleeper
	failing := false
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-tick.C:
		}
		f := c.shared()
		if f == nil {
			continue
		}
		buf = c.catalog.Sleepers(buf[:0])
		ok := c.shareLoad(f, buf, published)
		if !ok && !failing {
			c.logger.Warn("the fleet's storage cannot be used: the pools' load is this Caddy's own until it can")
		} else if ok && failing {
			c.logger.Info("the fleet's storage works again")
		}
		failing = !ok
	}
}

// shareLoad writes and reads the load of the pool instances among
// sleepers once; false if the storage failed.
func (c *Conn) shareLoad(f *fleet.Fleet, sleepers []catalog.Sleeper, published map[string]int) bool {
	ctx, cancel := context.WithTimeout(c.runCtx, loadEvery)
	defer cancel()
	now, ok := time.Now(), true
	seen := make(map[string]bool, len(sleepers))
	for _, sl := range sleepers {
		if _, pool := sl.Labels[catalog.LabelSoftLimit]; !pool || sl.Activity == nil {
			continue
		}
		seen[sl.ID] = true
		own := sl.Activity.InFlight()
		if own > 0 || published[sl.ID] > 0 {
			l := fleet.Lease{LastUse: now.Round(0), InFlight: own, Expires: now.Add(fleet.LeaseTTL(loadEvery)).Round(0)}
			if err := f.Publish(ctx, sl.ID, l); err != nil {
				c.metrics.fleetErrors("write").Inc()
				ok = false
			} else {
				published[sl.ID] = own
			}
		}
		others, err := f.OthersInFlight(ctx, sl.ID, now)
		if err != nil {
			c.metrics.fleetErrors("read").Inc()
			ok = false
			continue
		}
		sl.Activity.SetFleetLoad(others)
	}
	for id := range published {
		if !seen[id] {
			if err := f.Release(ctx, id); err != nil {
				c.logger.Debug("releasing a pool lease", zap.Error(err))
			}
			delete(published, id)
		}
	}
	return ok
}
