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

// loadEvery is how often the load is written and read; loadReadFor is
// how long after this Caddy last routed to a pool instance it still reads
// the others' load on it: one it does not route to costs no storage call.
const (
	loadEvery   = time.Second
	loadReadFor = 10 * time.Second
)

// shareLoadLoop shares the pools' load until the connection closes.
func (c *Conn) shareLoadLoop() {
	defer c.fleetLoops.Done()
	tick := time.NewTicker(loadEvery)
	defer tick.Stop()
	published := map[string]int{}
	var buf []catalog.Sleeper
	var health fleet.Health
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
		if err := c.shareLoad(f, buf, published); err != nil {
			health.Failed(c.logger, "the fleet's storage cannot be used: the pools' load is this Caddy's own until it can", err)
		} else {
			health.Works(c.logger)
		}
	}
}

// shareLoad writes and reads the load of the pool instances among
// sleepers once; the last error of the storage, if any.
func (c *Conn) shareLoad(f *fleet.Fleet, sleepers []catalog.Sleeper, published map[string]int) (failed error) {
	ctx, cancel := context.WithTimeout(c.runCtx, loadEvery)
	defer cancel()
	now := time.Now()
	seen := make(map[string]bool, len(sleepers))
	for _, sl := range sleepers {
		if _, pool := sl.Labels[catalog.LabelSoftLimit]; !pool || sl.Activity == nil {
			continue
		}
		seen[sl.ID] = true
		if sl.Activity.InFlight() == 0 && published[sl.ID] == 0 && now.Sub(sl.Activity.Last()) > loadReadFor {
			sl.Activity.SetFleetLoad(0) // not routed to: no storage call (read again once it is)
			continue
		}
		others, op, err := f.ShareLoad(ctx, sl.ID, sl.Activity.InFlight(), published, loadEvery, now)
		if err != nil {
			c.metrics.fleetErrors(op).Inc()
			failed = err
		}
		if op != "read" {
			sl.Activity.SetFleetLoad(others)
		}
	}
	for id := range published {
		if !seen[id] {
			if err := f.Release(ctx, id); err != nil {
				c.logger.Debug("releasing a pool lease", zap.Error(err))
			}
			delete(published, id)
		}
	}
	return failed
}
