package connection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
// storage, read back by every Caddy within switchesEvery (and before a
// connection first reports ready) and applied to its catalog; the weights
// of instances gone from the daemon are removed by the Caddys that follow
// it.

// switchesEvery is how often a connection reads its fleet's switches.
const switchesEvery = time.Second

// sweepEvery is how often a connection sweeps fleet.SweepFolders lease
// folders (fleet.Fleet.Sweep): those of instances gone while no Caddy
// that leased them ran.
const sweepEvery = 10 * time.Minute

// sweepRetry is when the sweep after one that failed (the storage away,
// or too slow for the sweep's minute) comes, if it found no garbage
// before it failed.
const sweepRetry = 10 * time.Second

// sweepPace is when the sweep after one that found garbage (leases and
// folders it removed, leases it refused) comes: in a second while it finds some, else after
// sweepEvery, or sweepRetry after one that failed. So the storage calls a
// sweep makes follow the garbage there is (one more sweep per sweep that
// found some), garbage made faster than 64 folders in 10 minutes (a busy
// deploy pipeline, a Caddy that died holding many leases) is gone within
// two passes over the tree, not hours later, and a storage away for a
// moment does not put the sweeps off for 10 minutes.
func sweepPace(garbage int, err error) time.Duration {
	switch {
	case garbage > 0:
		return time.Second
	case err != nil:
		return sweepRetry
	}
	return sweepEvery
}

// goneAfter is how long an instance with a runtime weight must have been
// missing from this Caddy's catalog, while the catalog is synced with its
// daemon (listed, and its events followed), before this Caddy removes the
// weight from the fleet's record (R4e): long past the time another Caddy,
// which set the weight on an instance it already saw, takes to hear of it.
const goneAfter = 10 * time.Second

// firstSwitchesWait bounds the first read of the fleet's switches, which
// a connection makes before it reports ready (Await), so that a Caddy that
// restarts serves its first request with them (R4e).
const firstSwitchesWait = 2 * time.Second

// fleetSwitches is a connection's part of its fleet's switches.
type fleetSwitches struct {
	// mu orders a change through this Caddy and the loop's read, so
	// that an older record read meanwhile never undoes the change.
	mu sync.Mutex
	// reader reads the record, telling an unchanged one before decoding
	// it (or loading it, with a storage that can Stat).
	reader *fleet.SwitchesReader
	// weights and maint are the switches last adopted, with their
	// origins, for the admin API; maintList is maint in the record's
	// order.
	weights   map[string]fleet.WeightSwitch
	maint     map[string]fleet.MaintenanceSwitch
	maintList []catalog.MaintenanceSwitch
	// missing are the weighted IDs the catalog did not hold at the last
	// look, each with since when it has been missing while the catalog
	// was synced (zero: it was not synced since). scanned is the snapshot
	// and synced the state of that look; dirty is set when weights
	// changed after it.
	missing map[string]time.Time
	// due is when the first of missing is gone (zero: none is missing
	// while synced).
	due     time.Time
	scanned *catalog.Snapshot
	synced  bool
	dirty   bool
	// first is the read made before the connection first reports ready.
	first sync.Once
	// now is the clock of goneAfter (nil: time.Now).
	now func() time.Time
	// health logs a failed read once, until one works.
	health fleet.Health
}

// ShareThrough makes storage, the config's, the one the connection shares
// with the other Caddys of a fleet, as self: scale to zero then keeps one
// idle clock per instance across them (R5m) and runtime switches hold
// across them (R4e). The last config loaded wins; the first call starts
// reading the fleet's switches, whose first read Await waits for. Every
// storage call is counted in caddy_dicer_fleet_storage_calls_total, every
// lease refused in caddy_dicer_fleet_leases_refused_total; the leases the
// connection holds go when it closes (Destruct).
func (c *Conn) ShareThrough(storage fleet.Storage, self fleet.Self) {
	c.fleetOnce.Do(func() {
		c.fleet = fleet.New(self)
		c.fleet.SetHooks(fleet.Hooks{
			Logger:  c.logger,
			Call:    func(op string) { c.metrics.fleetCalls(op).Inc() },
			Refused: func(reason string) { c.metrics.leasesRefused(reason).Inc() },
		})
		c.fleet.SetStorage(storage)
		c.switches.reader = fleet.NewSwitchesReader(c.daemonKey())
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
// then at sweepPace, and removes the leases from the future a sweep read
// once they hold nothing (fleet.Fleet.SweepDue), until the connection
// closes.
func (c *Conn) sweepLeases() {
	defer c.fleetLoops.Done()
	wait := time.NewTimer(switchesEvery)
	defer wait.Stop()
	full := time.Now().Add(switchesEvery)
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-wait.C:
		}
		f := c.shared()
		if f == nil {
			full = time.Now().Add(sweepEvery)
			wait.Reset(sweepEvery)
			continue
		}
		ctx, cancel := context.WithTimeout(c.runCtx, time.Minute)
		var wake time.Time
		full, wake = sweepStep(ctx, f, time.Now(), full, c.logger)
		cancel()
		wait.Reset(max(time.Until(wake), 0))
	}
}

// sweepStep makes the sweeps due at now: the sweep of the lease folders if
// full, its time, has come, and the removal of the leases from the future
// whose lease time is over. It returns when the next sweep of the folders
// is due and when to call again: then, or when the next lease from the
// future stops holding, a second from now at the earliest.
func sweepStep(ctx context.Context, f *fleet.Fleet, now, full time.Time, log *zap.Logger) (nextFull, wake time.Time) {
	if !now.Before(full) {
		n, err := f.Sweep(ctx, now)
		full = now.Add(sweepPace(n, err))
		if err != nil {
			log.Debug("sweeping the fleet's lease folders", zap.Error(err))
		} else if n > 0 {
			log.Debug("swept the fleet's lease folders", zap.Int("garbage", n))
		}
	}
	if due := f.NextDue(); !due.IsZero() && !due.After(now) {
		if n, err := f.SweepDue(ctx, now); err != nil {
			log.Debug("removing the fleet's leases from the future", zap.Error(err))
		} else if n > 0 {
			log.Debug("removed the fleet's leases from the future", zap.Int("removed", n))
		}
	}
	wake = full
	if due := f.NextDue(); !due.IsZero() && due.Before(wake) {
		wake = due
		if soon := now.Add(time.Second); wake.Before(soon) {
			wake = soon
		}
	}
	return full, wake
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

// synced reports whether the catalog is the daemon's now: listed, and its
// events followed since. Only then is an instance it lacks gone.
func (c *Conn) synced() bool {
	select {
	case <-c.catalog.Ready():
	default:
		return false
	}
	return c.status.snapshot().State == StateFollowing
}

// clock is the time now, for goneAfter.
func (s *fleetSwitches) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// awaitSwitches reads the fleet's switches once, before the connection
// first reports ready, for at most firstSwitchesWait (or what is left of
// the config load's wait, at least settleGrace): a Caddy that restarts
// serves its first request with the weights and maintenance set through
// the others (R4e). A read that fails or takes longer is logged; the
// switches then apply from the next read that works.
func (c *Conn) awaitSwitches(deadline time.Time) {
	f := c.shared()
	if f == nil {
		return
	}
	c.switches.first.Do(func() {
		wait := min(firstSwitchesWait, max(time.Until(deadline), settleGrace))
		ctx, cancel := context.WithTimeout(c.runCtx, wait)
		defer cancel()
		start := time.Now()
		if err := c.readSwitches(ctx, f); err != nil {
			c.metrics.fleetErrors("read").Inc()
			c.switches.health.Failed(nil, "", err) // "works again" once a read does
			c.logger.Warn("the fleet's switches could not be read before the routes serve: weights and maintenance set through other Caddys apply once a read works (R4e)",
				zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Error(err))
		}
	})
}

// syncSwitches reads the fleet's switches every switchesEvery, and at
// the catalog's first listing, until the connection closes, and applies
// them.
func (c *Conn) syncSwitches() {
	defer c.fleetLoops.Done()
	tick := time.NewTicker(switchesEvery)
	defer tick.Stop()
	listed := c.catalog.Ready()
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-listed:
			listed = nil // the weights of the instances just listed apply at once
		case <-tick.C:
		}
		f := c.shared()
		if f == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.runCtx, 5*time.Second)
		err := c.readSwitches(ctx, f)
		cancel()
		if err != nil {
			c.metrics.fleetErrors("read").Inc()
			c.switches.health.Failed(c.logger, "the fleet's switches cannot be read: the last ones read stay in force", err)
			continue
		}
		c.switches.health.Works(c.logger)
	}
}

// readSwitches reads the fleet's switches once, at the time its clock
// gives once it holds the lock: a changed record is
// adopted and applied; the weights of instances that came into the
// catalog are applied to them; those of instances gone are removed
// (pruneGone).
func (c *Conn) readSwitches(ctx context.Context, f *fleet.Fleet) error {
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	// The clock is read under the lock: a time taken before waiting for
	// it (another read's storage call holds it for up to seconds) would
	// date an instance's absence from before a change already looked at,
	// and prune its weight that much before goneAfter (R4e).
	now := c.switches.clock()
	sw, _, changed, err := c.switches.reader.Read(ctx, f, now)
	if err != nil {
		return err
	}
	if changed {
		c.adopt(sw)
	}
	c.look(now)
	c.pruneGone(ctx, f, now)
	return nil
}

// adopt makes sw this catalog's switches. c.switches.mu is held.
func (c *Conn) adopt(sw fleet.Switches) {
	s := &c.switches
	s.weights = sw.Weights
	s.maint = make(map[string]fleet.MaintenanceSwitch, len(sw.Maintenance))
	s.maintList = make([]catalog.MaintenanceSwitch, 0, len(sw.Maintenance))
	for _, m := range sw.Maintenance {
		s.maintList = append(s.maintList, catalog.MaintenanceSwitch{Selector: m.Selector, Message: m.Message})
		s.maint[m.Selector] = m
	}
	s.dirty = true
	c.applyWeights()
	c.catalog.ReplaceMaintenance(s.maintList)
}

// applyWeights gives the catalog's instances the weights adopted.
// c.switches.mu is held.
func (c *Conn) applyWeights() {
	want := make(map[string]int, len(c.switches.weights))
	for id, w := range c.switches.weights {
		want[id] = w.Weight
	}
	c.catalog.SetRuntimeWeights(want)
}

// look notes which weighted instances the catalog lacks, when it or the
// weights changed since the last look, and since when each has been
// missing while the catalog was synced; a weighted instance that came
// into the catalog gets its weight. c.switches.mu is held.
func (c *Conn) look(now time.Time) {
	s := &c.switches
	snap, synced := c.catalog.Snapshot(), c.synced()
	if snap == s.scanned && synced == s.synced && !s.dirty {
		return
	}
	s.scanned, s.synced, s.dirty = snap, synced, false
	came := false
	if s.missing == nil {
		s.missing = make(map[string]time.Time)
	}
	for id := range s.missing {
		if _, weighted := s.weights[id]; !weighted {
			delete(s.missing, id)
		}
	}
	c.catalog.Holding(maps.Keys(s.weights), func(id string, held bool) {
		since, was := s.missing[id]
		if held {
			if was {
				came = true
				delete(s.missing, id)
			}
			return
		}
		switch {
		case !synced:
			since = time.Time{}
		case !was || since.IsZero():
			since = now
		}
		s.missing[id] = since
	})
	s.due = time.Time{}
	for _, since := range s.missing {
		if !since.IsZero() && (s.due.IsZero() || since.Add(goneAfter).Before(s.due)) {
			s.due = since.Add(goneAfter)
		}
	}
	if came {
		c.applyWeights()
	}
}

// pruneGone removes from the fleet's record the weights of instances
// missing from the synced catalog for goneAfter (R4e): each Caddy that
// follows the daemon does, so they go while any Caddy of the fleet runs.
// c.switches.mu is held.
func (c *Conn) pruneGone(ctx context.Context, f *fleet.Fleet, now time.Time) {
	if c.switches.due.IsZero() || now.Before(c.switches.due) {
		return
	}
	var due []string
	for id, since := range c.switches.missing {
		if !since.IsZero() && now.Sub(since) >= goneAfter {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return
	}
	var dropped []string
	var written fleet.Switches
	raw, err := f.UpdateSwitches(ctx, c.daemonKey(), func(sw *fleet.Switches) error {
		if dropped = sw.DropWeights(due); len(dropped) == 0 {
			return errUnchanged
		}
		written = *sw
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged): // another Caddy removed them: look again
		c.switches.dirty = true
		return
	case err != nil:
		c.metrics.fleetErrors("write").Inc()
		c.logger.Debug("removing the runtime weights of gone instances", zap.Error(err))
		return
	}
	c.switches.reader.Wrote(raw)
	c.adopt(written)
	c.logger.Info("runtime weights of instances gone from the daemon removed from the fleet's switches (R4e)",
		zap.Int("removed", len(dropped)), zap.Int("kept", len(written.Weights)))
}

// errUnchanged stops a change of the fleet's record that has nothing to
// write.
var errUnchanged = errors.New("nothing to change")

// gone reports whether the instance id has been missing from the synced
// catalog for goneAfter at now. c.switches.mu is held.
func (c *Conn) gone(id string, now time.Time) bool {
	since, ok := c.switches.missing[id]
	return ok && !since.IsZero() && now.Sub(since) >= goneAfter
}

// ErrFleetStorage wraps a failure of the fleet's storage to take a switch:
// nothing changed.
var ErrFleetStorage = errors.New("the fleet's storage")

// ErrWeightsFull is the error of a weight that would keep more than
// fleet.MaxWeightSwitches runtime weights on a daemon, all of instances
// the catalog holds: nothing changed.
var ErrWeightsFull = fleet.ErrFull

// GoneWeight is a runtime weight that a clear removed from the fleet's
// record, of an instance the catalog does not hold (R4e).
type GoneWeight struct {
	ID, Name string
}

// SetWeight gives every instance that match selects the runtime weight
// weight, or clears it when weight is negative (R4c, catalog.SetWeight).
// In a fleet, it is written to the shared storage first, for every Caddy
// (R4e); if that fails, nothing changes and the error wraps
// ErrFleetStorage. There, a weight that would keep over
// fleet.MaxWeightSwitches first removes the oldest weights of instances
// the synced catalog lacks, else fails with ErrWeightsFull; and a clear
// reaches the weights of instances the catalog lacks too: those match
// selects by name alone (labels nil), which it returns as gone, and those
// of instances gone (missing for goneAfter).
func (c *Conn) SetWeight(match func(labels map[string]string, name string) bool, weight int) ([]catalog.WeightChange, []GoneWeight, error) {
	f := c.shared()
	if f == nil {
		return c.catalog.SetWeight(match, weight), nil, nil
	}
	c.switches.mu.Lock()
	defer c.switches.mu.Unlock()
	var chosen []catalog.InstanceStatus
	for _, st := range c.catalog.Instances(nil) {
		if match(st.Labels, st.Name) {
			chosen = append(chosen, st)
		}
	}
	if len(chosen) == 0 && weight >= 0 {
		return nil, nil, nil
	}
	from, host, at := f.Stamp()
	now, synced := c.switches.clock(), c.synced()
	ctx, cancel := context.WithTimeout(c.runCtx, 10*time.Second)
	defer cancel()
	var gone []GoneWeight
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
		changed := false
		for _, st := range chosen {
			if weight < 0 {
				_, had := sw.Weights[st.ID]
				changed = changed || had
				delete(sw.Weights, st.ID)
			} else {
				changed = true
				sw.Weights[st.ID] = fleet.WeightSwitch{Weight: min(weight, catalog.MaxWeight), Name: clip(st.Name, fleet.MaxSwitchName),
					From: from, Host: host, At: at}
			}
		}
		if weight >= 0 {
			_, err := sw.MakeRoom(now, func(id string) bool { return synced && lacked[id] })
			written = *sw
			return err
		}
		for id := range lacked {
			w := sw.Weights[id]
			if match(nil, w.Name) {
				gone = append(gone, GoneWeight{ID: id, Name: w.Name})
			} else if !c.gone(id, now) {
				continue
			}
			delete(sw.Weights, id)
			changed = true
		}
		if !changed {
			return errUnchanged
		}
		written = *sw
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return c.catalog.SetWeight(match, weight), nil, nil // nothing in the record: the catalog's own
	case errors.Is(err, fleet.ErrFull):
		return nil, nil, err
	case err != nil:
		c.metrics.fleetErrors("write").Inc()
		return nil, nil, fmt.Errorf("%w: %w", ErrFleetStorage, err)
	}
	out := c.catalog.SetWeight(match, weight)
	c.switches.reader.Wrote(raw)
	c.adopt(written)
	slices.SortFunc(gone, func(a, b GoneWeight) int { return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID)) })
	return out, gone, nil
}

// clip is s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
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
	var written fleet.Switches
	raw, err := f.UpdateSwitches(ctx, c.daemonKey(), func(sw *fleet.Switches) error {
		kept := sw.Maintenance[:0]
		for _, m := range sw.Maintenance {
			if m.Selector != key {
				kept = append(kept, m)
			}
		}
		if on {
			if len(kept) >= catalog.MaxMaintenanceSelectors {
				full = true
				return errUnchanged
			}
			kept = append(kept, fleet.MaintenanceSwitch{Selector: key, Message: catalog.MaintenanceMessage(message), From: from, Host: host, At: at})
		}
		sw.Maintenance = kept
		written = *sw
		return nil
	})
	if full {
		return 0, false, nil
	}
	if err != nil {
		c.metrics.fleetErrors("write").Inc()
		return 0, true, fmt.Errorf("%w: %w", ErrFleetStorage, err)
	}
	changed, ok = c.catalog.SetMaintenance(sel, message, on)
	c.switches.reader.Wrote(raw)
	c.adopt(written)
	return changed, ok, nil
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
