package connection

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// A connection in a fleet of Caddys that share a storage (R5m, R4e): its
// scale to zero keeps one idle clock per instance across them
// (internal/standby's leases), and its runtime switches (weights,
// maintenance) are the fleet's: set through any Caddy, written to the
// storage, read back by every Caddy within switchesEvery and applied to
// its catalog.

// switchesEvery is how often a connection reads its fleet's switches.
const switchesEvery = time.Second

// sweepEvery is how often a connection sweeps fleet.SweepFolders lease
// folders (fleet.Fleet.Sweep): those of instances gone while no Caddy
// that leased them ran.
const sweepEvery = 10 * time.Minute

// fleetSwitches is a connection's part of its fleet's switches.
type fleetSwitches struct {
	// mu orders a change through this Caddy and the loop's read, so
	// that an older record read meanwhile never undoes the change.
	mu sync.Mutex
	// applied is the record last applied (nil: none), and origins the
	// switches' origins in it, for the admin API.
	applied []byte
	weights map[string]fleet.WeightSwitch
	maint   map[string]fleet.MaintenanceSwitch
	// health logs a failed read once, until one works.
	health fleet.Health
}

// ShareThrough makes storage, the config's, the one the connection shares
// with the other Caddys of a fleet, as self: scale to zero then keeps one
// idle clock per instance across them (R5m) and runtime switches hold
// across them (R4e). The last config loaded wins; the first call starts
// reading the fleet's switches. Every storage call is counted in
// caddy_dicer_fleet_storage_calls_total, every lease refused in
// caddy_dicer_fleet_leases_refused_total; the leases the connection
// holds go when it closes (Destruct).
func (c *Conn) ShareThrough(storage fleet.Storage, self fleet.Self) {
	c.fleetOnce.Do(func() {
		c.fleet = fleet.New(self)
		c.fleet.SetHooks(fleet.Hooks{
			Logger:  c.logger,
			Call:    func(op string) { c.metrics.fleetCalls(op).Inc() },
			Refused: func(reason string) { c.metrics.leasesRefused(reason).Inc() },
		})
		c.fleet.SetStorage(storage)
		c.fleetLoops.Add(2)
		go c.syncSwitches()
		go c.sweepLeases()
		if c.scale.mode == scaleOnConnect {
			c.fleetLoops.Add(1)
			go c.shareLoadLoop() // a Dicer pool's load (R5j, fleetload.go)
		}
	})
	c.fleet.SetStorage(storage)
	failed := func(op string) { c.metrics.fleetErrors(op).Inc() }
	switch c.scale.mode {
	case scaleStandby:
		c.scale.standby.Engine().ShareThrough(c.fleet, c.logger, failed)
	case scaleReplicas:
		c.scale.replicas.ShareThrough(c.fleet, failed)
	}
}

// daemonKey names the daemon in the fleet's records: its kind and address,
// which every Caddy of a fleet gives alike.
func (c *Conn) daemonKey() string { return c.kind + " " + c.address }

// shared is the fleet when it has a storage, else nil.
func (c *Conn) shared() *fleet.Fleet {
	if c.fleet != nil && c.fleet.Shared() {
		return c.fleet
	}
	return nil
}

// sweepLeases sweeps the lease folders once soon after the start and
// then every sweepEvery, until the connection closes.
func (c *Conn) sweepLeases() {
	defer c.fleetLoops.Done()
	wait := time.NewTimer(switchesEvery)
	defer wait.Stop()
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-wait.C:
		}
		wait.Reset(sweepEvery)
		f := c.shared()
		if f == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.runCtx, time.Minute)
		n, err := f.Sweep(ctx, time.Now())
		cancel()
		if err != nil {
			c.logger.Debug("sweeping the fleet's lease folders", zap.Error(err))
		} else if n > 0 {
			c.logger.Debug("swept the fleet's lease folders", zap.Int("removed", n))
		}
	}
}

// releaseLeases deletes the leases this connection holds (Dicer's pools,
// Swarm's services; Docker's Engine releases its own as it stops), once
// its loops have stopped: it closes for good.
func (c *Conn) releaseLeases() {
	c.fleetLoops.Wait()
	if c.fleet == nil || c.scale.mode == scaleStandby {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.fleet.ReleaseAll(ctx); err != nil {
		c.logger.Debug("releasing the fleet's leases as the connection closes", zap.Error(err))
	}
}

// syncSwitches reads the fleet's switches every switchesEvery until the
// connection closes, and applies them.
func (c *Conn) syncSwitches() {
	defer c.fleetLoops.Done()
	tick := time.NewTicker(switchesEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-tick.C:
		}
		if f := c.shared(); f != nil {
			c.readSwitches(f)
		}
	}
}

// readSwitches reads and applies the fleet's switches once.
func (c *Conn) readSwitches(f *fleet.Fleet) {
	ctx, cancel := context.WithTimeout(c.runCtx, 5*time.Second)
	defer cancel()
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	sw, raw, err := f.LoadSwitches(ctx, c.daemonKey())
	if err != nil {
		c.metrics.fleetErrors("read").Inc()
		c.switches.health.Failed(c.logger, "the fleet's switches cannot be read: the last ones read stay in force", err)
		return
	}
	c.switches.health.Works(c.logger)
	c.applySwitches(sw, raw)
}

// applySwitches makes sw, the record raw, this catalog's switches, unless
// raw is what was applied last and the catalog holds no instance it did
// not hold then. c.switches.mu is held.
func (c *Conn) applySwitches(sw fleet.Switches, raw []byte) {
	if raw == nil && c.switches.applied == nil {
		return // no switch was ever set: nothing to apply, no catalog to count
	}
	if raw != nil && bytes.Equal(raw, c.switches.applied) && !c.catalogGrew() {
		return
	}
	want := make(map[string]int, len(sw.Weights))
	for id, w := range sw.Weights {
		want[id] = w.Weight
	}
	c.catalog.SetRuntimeWeights(want)
	maint := make([]catalog.MaintenanceSwitch, 0, len(sw.Maintenance))
	byKey := make(map[string]fleet.MaintenanceSwitch, len(sw.Maintenance))
	for _, m := range sw.Maintenance {
		maint = append(maint, catalog.MaintenanceSwitch{Selector: m.Selector, Message: m.Message})
		byKey[m.Selector] = m
	}
	c.catalog.ReplaceMaintenance(maint)
	c.switches.applied, c.switches.weights, c.switches.maint = raw, sw.Weights, byKey
}

// catalogGrew reports whether the catalog holds an instance it did not at
// the last call: a weight set on it by the fleet is applied then.
func (c *Conn) catalogGrew() bool {
	n := c.catalog.Counts()
	total := 0
	for _, k := range n.ByState {
		total += k
	}
	grew := total != c.switchesSeen
	c.switchesSeen = total
	return grew
}

// ErrFleetStorage wraps a failure of the fleet's storage to take a switch:
// nothing changed.
var ErrFleetStorage = errors.New("the fleet's storage")

// SetWeight gives every instance that match selects the runtime weight
// weight, or clears it when weight is negative (R4c, catalog.SetWeight).
// In a fleet, it is written to the shared storage first, for every Caddy
// (R4e); if that fails, nothing changes and the error wraps
// ErrFleetStorage.
func (c *Conn) SetWeight(match func(labels map[string]string, name string) bool, weight int) ([]catalog.WeightChange, error) {
	f := c.shared()
	if f == nil {
		return c.catalog.SetWeight(match, weight), nil
	}
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	var chosen []catalog.InstanceStatus
	for _, st := range c.catalog.Instances(nil) {
		if match(st.Labels, st.Name) {
			chosen = append(chosen, st)
		}
	}
	if len(chosen) == 0 {
		return nil, nil
	}
	from, host, at := f.Stamp()
	ctx, cancel := context.WithTimeout(c.runCtx, 10*time.Second)
	defer cancel()
	raw, err := f.UpdateSwitches(ctx, c.daemonKey(), func(sw *fleet.Switches) {
		if sw.Weights == nil {
			sw.Weights = map[string]fleet.WeightSwitch{}
		}
		for _, st := range chosen {
			if weight < 0 {
				delete(sw.Weights, st.ID)
			} else {
				sw.Weights[st.ID] = fleet.WeightSwitch{Weight: min(weight, catalog.MaxWeight), Name: st.Name, From: from, Host: host, At: at}
			}
		}
	})
	if err != nil {
		c.metrics.fleetErrors("write").Inc()
		return nil, fmt.Errorf("%w: %w", ErrFleetStorage, err)
	}
	out := c.catalog.SetWeight(match, weight)
	c.reapply(raw)
	return out, nil
}

// SetMaintenance puts the instances sel matches in maintenance with
// message (on), or takes sel's switch off (R5i, catalog.SetMaintenance).
// In a fleet, it is written to the shared storage first, for every Caddy
// (R4e); if that fails, nothing changes and the error wraps
// ErrFleetStorage. ok is false when on would exceed
// catalog.MaxMaintenanceSelectors.
func (c *Conn) SetMaintenance(sel selector.Selector, message string, on bool) (changed int, ok bool, err error) {
	f := c.shared()
	if f == nil {
		changed, ok = c.catalog.SetMaintenance(sel, message, on)
		return changed, ok, nil
	}
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	key := sel.String()
	from, host, at := f.Stamp()
	ctx, cancel := context.WithTimeout(c.runCtx, 10*time.Second)
	defer cancel()
	full := false
	raw, err := f.UpdateSwitches(ctx, c.daemonKey(), func(sw *fleet.Switches) {
		kept := sw.Maintenance[:0]
		for _, m := range sw.Maintenance {
			if m.Selector != key {
				kept = append(kept, m)
			}
		}
		if on {
			if len(kept) >= catalog.MaxMaintenanceSelectors {
				full = true
				return
			}
			kept = append(kept, fleet.MaintenanceSwitch{Selector: key, Message: catalog.MaintenanceMessage(message), From: from, Host: host, At: at})
		}
		sw.Maintenance = kept
	})
	if full {
		return 0, false, nil
	}
	if err != nil {
		c.metrics.fleetErrors("write").Inc()
		return 0, true, fmt.Errorf("%w: %w", ErrFleetStorage, err)
	}
	changed, ok = c.catalog.SetMaintenance(sel, message, on)
	c.reapply(raw)
	return changed, ok, nil
}

// reapply records raw, just written, as applied, with its origins.
// c.switches.mu is held.
func (c *Conn) reapply(raw []byte) {
	var sw fleet.Switches
	if err := json.Unmarshal(raw, &sw); err == nil {
		c.applySwitches(sw, raw)
	}
}

// SwitchOrigin says where the runtime switch of instance id came from
// (its weight, R4e): "" when it was not set through a fleet, else the host
// name (or ID) of the Caddy it was set through.
func (c *Conn) SwitchOrigin(id string) string {
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	return origin(c.switches.weights[id].From, c.switches.weights[id].Host)
}

// MaintenanceOrigin says where the maintenance switch of selector (as
// catalog.MaintenanceSwitches gives it) came from: "" when not through a
// fleet.
func (c *Conn) MaintenanceOrigin(selector string) string {
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	m := c.switches.maint[selector]
	return origin(m.From, m.Host)
}

func origin(from, host string) string {
	switch {
	case from == "":
		return ""
	case host != "":
		return host + " (" + from + ")"
	}
	return from
}
