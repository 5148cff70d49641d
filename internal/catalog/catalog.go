package catalog

import (
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/immutable"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Options are the daemon-wide facts a Catalog routes with.
type Options struct {
	// PublishedPortHost is where ports published on every host address are
	// reached (R4), when set.
	PublishedPortHost string
	// DaemonHost is the host of the daemon's TCP address when that is not
	// loopback (R4).
	DaemonHost string
	// Logger receives one line per instance joining or leaving a rotation
	// (R6) and one warning per bad label value (R3).
	Logger *zap.Logger
	// Probe, if set, is asked to check each running instance without a
	// health check before it joins rotations (R1a), and answers later
	// with MarkReady. It is called with the catalog's lock held: it must
	// not block, nor call the catalog. nil admits such instances at once.
	Probe func(ProbeRequest)
	// Froze, if set, is told each time an instance is seen frozen (on
	// standby, or paused), or stopping, where it was not: the proxy then
	// drops the connections it keeps alive to it (R5a). It is called with the
	// catalog's lock held, before the change is published, so that no
	// request is sent to the instance as one to wake (R5.2) before it
	// returns. It must not call the catalog.
	Froze func(id string)
	// Refused, if set, is called with the label set (caddy-docker-proxy,
	// traefik) each time the catalog warns that an instance's foreign
	// labels are refused (R2f): once per instance and change of its
	// refusal. It must not call the catalog.
	Refused func(set string)
	// DependsOnAnyScope lets a caddy.depends_on reach any instance of the
	// daemon; by default it reaches those of its own Compose project or
	// Swarm stack only (R5k, the source's depends_on_scope).
	DependsOnAnyScope bool
	// Lifecycle, if set, hears each instance a route or the permission
	// could use joining or leaving its rotations, or removed while on
	// standby, with the exact hosts it claims and why (R6, R13e, R5o). It
	// is called with the catalog's lock held: it must not block, nor call
	// the catalog.
	Lifecycle func(change Change, inst Instance, hosts []string, why string)
}

// Catalog holds what is known of one daemon's instances. Adapters write to
// it through Sink; readers take a Snapshot, which never changes, so a
// request costs one atomic load plus map lookups and never waits on a
// writer. Writes cost O(log n) in the number of instances, plus the size
// of the selector views the changed instance belongs to.
type Catalog struct {
	reach  reach
	logger *zap.Logger
	// depAny is Options.DependsOnAnyScope.
	depAny bool

	current atomic.Pointer[Snapshot]
	ready   chan struct{}

	mu      sync.Mutex // serializes writers; readers never take it
	byID    map[string]*entry
	views   map[string]*View // by canonical selector
	replace sync.Once

	probe   func(ProbeRequest)
	froze   func(id string)
	refused func(set string)
	// stripLabelled is set once an instance had caddy.strip_path=true
	// (R2d), and stays: until then, a request of a source without
	// strip_path_prefix never looks for a prefix to strip.
	stripLabelled bool
	probeGen      uint64
	seq           uint64           // changes from the daemon so far (see Seq)
	routePorts    map[int]int      // route port -> routes using it
	spelt         map[string]spelt // place -> who last had it (see spellApart)
	// maintenance are the selectors in maintenance by their text, and
	// maintenanceKeys their texts in order (R5i, maintenance.go).
	maintenance     map[string]maintenanceRule
	maintenanceKeys []string
	// feed records the sleepers that changed, for the idle loop (R5l,
	// sleepers.go).
	feed sleeperFeed
	// lifecycle is Options.Lifecycle (R13e).
	lifecycle func(change Change, inst Instance, hosts []string, why string)
	// removed are the instances removed while on standby (R5o, removed.go).
	removed atomic.Pointer[removedSleepers]
}

// Snapshot is the catalog at one moment: the index by exact host, the
// index by wildcard suffix ("example.com" for "*.example.com", R2a) and the
// instances each watched selector matches, all sorted by instance name.
type Snapshot struct {
	reach     *reach
	hosts     *immutable.Map[string, []*entry]
	wildcards *immutable.Map[string, []*entry]
	views     map[*View][]*entry
	// hostPaths, wildPaths and viewPaths are the segment tries of the
	// lists of hosts, wildcards and views that hold an instance labelled
	// caddy.path (R2d), under the same keys; a list without one has none.
	hostPaths *immutable.Map[string, *pathNode]
	wildPaths *immutable.Map[string, *pathNode]
	viewPaths map[*View]*pathNode
	// next is closed when a newer snapshot replaces this one.
	next chan struct{}
	// stripLabelled is the catalog's when the snapshot was stored.
	stripLabelled bool
}

// Changed is closed as soon as a newer snapshot replaces s: a request that
// waits for an instance to become routable (a wake, R5) waits on it, and
// no one polls.
func (s *Snapshot) Changed() <-chan struct{} { return s.next }

// store publishes snap, then tells the waiters on the one it replaces.
// Writers hold c.mu (New excepted, which has no reader yet).
func (c *Catalog) store(snap *Snapshot) {
	snap.next = make(chan struct{})
	snap.stripLabelled = c.stripLabelled
	old := c.current.Swap(snap)
	if old != nil {
		close(old.next)
	}
}

// View is a selector the catalog keeps the matching instances of, so a
// request never evaluates a selector (R8). Get one with Catalog.Watch.
type View struct {
	sel  selector.Selector
	refs int
}

// New returns an empty catalog; Ready is closed at its first Replace.
func New(opts Options) *Catalog {
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	c := &Catalog{
		reach:  reach{publishedPortHost: opts.PublishedPortHost, daemonHost: opts.DaemonHost},
		logger: logger,
		depAny: opts.DependsOnAnyScope,
		ready:  make(chan struct{}),
		byID:   make(map[string]*entry),
		views:  make(map[string]*View),

		probe:      opts.Probe,
		refused:    opts.Refused,
		froze:      opts.Froze,
		lifecycle:  opts.Lifecycle,
		routePorts: make(map[int]int),
		spelt:      make(map[string]spelt),
	}
	c.store(&Snapshot{
		reach:     &c.reach,
		hosts:     immutable.NewMap[string, []*entry](newHasher()),
		wildcards: immutable.NewMap[string, []*entry](newHasher()),
		views:     map[*View][]*entry{},
		hostPaths: emptyPaths(),
		wildPaths: emptyPaths(),
		viewPaths: map[*View]*pathNode{},
	})
	return c
}

// Snapshot returns the current state; it is safe to keep and read
// concurrently.
func (c *Catalog) Snapshot() *Snapshot { return c.current.Load() }

// Len is how many instances the catalog holds.
func (c *Catalog) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// Ready is closed once the first full listing has arrived.
func (c *Catalog) Ready() <-chan struct{} { return c.ready }

// Watch returns the view of sel, shared by every caller with an equal
// selector. Release it with Unwatch.
func (c *Catalog) Watch(sel selector.Selector) *View {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sel.String()
	if v, ok := c.views[key]; ok {
		v.refs++
		return v
	}
	v := &View{sel: sel, refs: 1}
	c.probeWatched(sel)
	var matched []*entry
	for _, e := range c.byID {
		if sel.Matches(e.inst.Labels) {
			matched = append(matched, e)
			c.logNewRoute(v, e)
		}
	}
	c.views[key] = v
	slices.SortFunc(matched, byName)
	old := c.current.Load()
	views := make(map[*View][]*entry, len(old.views)+1)
	for k, es := range old.views {
		views[k] = es
	}
	views[v] = matched
	viewPaths := maps.Clone(old.viewPaths)
	if n := buildPaths(matched); n != nil {
		viewPaths[v] = n
	}
	c.store(&Snapshot{reach: old.reach, hosts: old.hosts, wildcards: old.wildcards, views: views,
		hostPaths: old.hostPaths, wildPaths: old.wildPaths, viewPaths: viewPaths})
	return v
}

// logNewRoute logs what a new selector view v, which matches e, changes
// for e: it joins a rotation if no route could use it before, and v's
// route sends it requests only for the hosts it lists, if it lists any
// (R2). c.mu is held; v is not in c.views yet.
func (c *Catalog) logNewRoute(v *View, e *entry) {
	wasRelevant := c.relevant(e)
	c.warnHostOnSelector(v, nil, e)
	if !wasRelevant && c.inRotation(e) {
		why := "running, and a route's selector " + v.sel.String() + " matches it"
		c.logger.Info("instance joins rotation", zap.String("instance", e.inst.Name), zap.String("why", why))
		c.tellLifecycle(Joined, e, why)
	}
}

// Unwatch releases a view from Watch.
func (c *Catalog) Unwatch(v *View) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.refs <= 0 {
		return // already released
	}
	if v.refs--; v.refs > 0 {
		return
	}
	if key := v.sel.String(); c.views[key] == v {
		delete(c.views, key)
	}
	old := c.current.Load()
	views := make(map[*View][]*entry, len(old.views))
	for k, es := range old.views {
		if k != v {
			views[k] = es
		}
	}
	viewPaths := maps.Clone(old.viewPaths)
	delete(viewPaths, v)
	c.store(&Snapshot{reach: old.reach, hosts: old.hosts, wildcards: old.wildcards, views: views,
		hostPaths: old.hostPaths, wildPaths: old.wildPaths, viewPaths: viewPaths})
}

// Put implements Sink.
func (c *Catalog) Put(inst Instance) {
	// Its labels parsed before the lock: a long one delays no other update.
	e := newEntry(c.reach.withHostAddress(inst)) // R11h
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stripLabelled = c.stripLabelled || e.strip == stripYes // R2d
	old := c.byID[inst.ID]
	if e.stopping = holdStopping(old, &e.inst); e.stopping {
		e.setNotes(func(n *entryNotes) { n.stopWhy = old.note().stopWhy })
	}
	c.markMaintenance(e) // R5i
	e.keepApart(old)
	c.spellApart(e, func(id string) *entry { return c.byID[id] })
	c.tellFroze(old, e)
	e.keepActivity(old)
	e.keepAsleep(old, time.Now()) // R5o
	e.keepRuntimeWeight(old)
	c.seq++
	e.seq = c.seq
	e.keepEvents(old)
	probe := c.admit(old, e)
	c.byID[inst.ID] = e
	c.publish(c.current.Load(), old, e)
	c.logChange(old, e, "")
	c.claimRemoved(e) // R5o
	c.sendProbe(probe)
}

// forget records old, which the daemon removed, if it was on standby
// (R5o), and says so to Options.Lifecycle. c.mu is held.
func (c *Catalog) forget(old *entry) {
	if now := time.Now(); old.asleep(now) {
		c.noteRemoved(old, now)
		if c.relevant(old) {
			c.tellLifecycle(Removed, old, "removed while on standby: nothing will wake it")
		}
	}
}

// tellFroze calls Options.Froze if e, replacing old, shows the instance
// freeze. c.mu is held, and e is not published yet.
func (c *Catalog) tellFroze(old, e *entry) {
	if c.froze != nil && e.froze(old) {
		c.froze(e.inst.ID)
	}
}

// sendProbe sends a request from admit, if any.
func (c *Catalog) sendProbe(r ProbeRequest) {
	if r.Gen != 0 {
		c.probe(r)
	}
}

// Delete implements Sink.
func (c *Catalog) Delete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.byID[id]
	if !ok {
		return
	}
	delete(c.byID, id)
	c.publish(c.current.Load(), old, nil)
	c.logChange(old, nil, "deleted")
	c.forget(old)
}

// Replace implements Sink: it rebuilds every index from a full listing.
func (c *Catalog) Replace(instances []Instance) {
	entries := make([]*entry, len(instances)) // labels parsed before the lock
	for i, inst := range instances {
		entries[i] = newEntry(c.reach.withHostAddress(inst)) // R11h
	}
	c.mu.Lock()
	for _, e := range entries {
		c.stripLabelled = c.stripLabelled || e.strip == stripYes // R2d
	}
	defer c.mu.Unlock()
	next := make(map[string]*entry, len(instances))
	var probes []ProbeRequest
	c.seq++
	listed := make(map[string]bool, len(instances))
	for _, inst := range instances {
		listed[inst.ID] = true
	}
	live := func(id string) *entry { // in the listing: as applied, else as it was
		if e := next[id]; e != nil || !listed[id] {
			return e
		}
		return c.byID[id]
	}
	for _, e := range entries {
		// A re-listing ends a Stopping: a start missed while the daemon was
		// out of reach must not keep an instance out for good. One still
		// draining is running again here, so it is probed (R1a), and an
		// app that closed its port on SIGTERM stays out until it dies.
		old := c.byID[e.inst.ID]
		c.markMaintenance(e) // R5i
		e.keepApart(old)
		c.spellApart(e, live)
		c.tellFroze(old, e) // before the store below
		e.keepActivity(old)
		e.keepAsleep(old, time.Now()) // R5o
		e.keepRuntimeWeight(old)
		e.seq = c.seq
		e.keepEvents(old)
		if r := c.admit(old, e); r.Gen != 0 {
			probes = append(probes, r)
		}
		next[e.inst.ID] = e
	}

	for id, old := range c.byID {
		if _, ok := next[id]; !ok {
			c.logChange(old, nil, "gone from the daemon's listing")
			c.forget(old)
		}
	}
	for id, e := range next {
		c.logChange(c.byID[id], e, "")
		c.claimRemoved(e) // R5o
	}
	prev := c.byID
	c.byID = next
	for id, old := range prev {
		c.noteSleeper(old, next[id]) // R5l
	}
	for id, e := range next {
		if prev[id] == nil {
			c.noteSleeper(nil, e)
		}
	}

	all := make([]*entry, 0, len(next))
	for _, e := range next {
		all = append(all, e)
	}
	slices.SortFunc(all, byName)
	hosts := immutable.NewMapBuilder[string, []*entry](newHasher())
	wildcards := immutable.NewMapBuilder[string, []*entry](newHasher())
	for _, e := range all {
		for _, h := range e.hosts {
			list, _ := hosts.Get(h)
			hosts.Set(h, append(list, e))
		}
		for _, w := range e.wildcards {
			list, _ := wildcards.Get(w)
			wildcards.Set(w, append(list, e))
		}
	}
	views := make(map[*View][]*entry, len(c.views))
	viewPaths := make(map[*View]*pathNode)
	for _, v := range c.views {
		var matched []*entry
		for _, e := range all {
			if v.sel.Matches(e.inst.Labels) {
				matched = append(matched, e)
				c.warnHostOnSelector(v, prev[e.inst.ID], e)
			}
		}
		views[v] = matched
		if n := buildPaths(matched); n != nil {
			viewPaths[v] = n
		}
	}
	hostIndex, wildIndex := hosts.Map(), wildcards.Map()
	c.store(&Snapshot{reach: &c.reach, hosts: hostIndex, wildcards: wildIndex, views: views,
		hostPaths: buildIndexPaths(hostIndex, all, func(e *entry) []string { return e.hosts }),
		wildPaths: buildIndexPaths(wildIndex, all, func(e *entry) []string { return e.wildcards }),
		viewPaths: viewPaths})
	for _, r := range probes {
		c.sendProbe(r) // before Ready: whoever waits for it may wait for these
	}
	c.replace.Do(func() { close(c.ready) })
}

// publish swaps in a snapshot where old (nil: none) is replaced by e (nil:
// deleted). Only the hosts and wildcard suffixes the two claim and the
// views they match change.
func (c *Catalog) publish(snap *Snapshot, old, e *entry) {
	c.noteSleeper(old, e) // R5l
	byHost := func(e *entry) []string { return e.hosts }
	byWildcard := func(e *entry) []string { return e.wildcards }
	hosts := reindex(snap.hosts, old, e, byHost)
	wildcards := reindex(snap.wildcards, old, e, byWildcard)
	views := snap.views
	copied := false
	viewPaths := snap.viewPaths
	pathed, pathsCopied := old != nil && old.pathed || e != nil && e.pathed, false
	for v, list := range snap.views {
		was := old != nil && v.sel.Matches(old.inst.Labels)
		is := e != nil && v.sel.Matches(e.inst.Labels)
		if !was && !is {
			continue
		}
		if is {
			c.warnHostOnSelector(v, old, e)
		}
		if !copied {
			views = make(map[*View][]*entry, len(snap.views))
			for k, l := range snap.views {
				views[k] = l
			}
			copied = true
		}
		views[v] = swap(list, old, e, is)
		if _, had := viewPaths[v]; had || pathed { // R2d
			if !pathsCopied {
				viewPaths, pathsCopied = maps.Clone(snap.viewPaths), true
			}
			setViewPaths(viewPaths, v, views[v])
		}
	}
	c.store(&Snapshot{reach: snap.reach, hosts: hosts, wildcards: wildcards, views: views,
		hostPaths: repath(snap.hostPaths, hosts, old, e, byHost),
		wildPaths: repath(snap.wildPaths, wildcards, old, e, byWildcard),
		viewPaths: viewPaths})
}

// reindex returns index with old replaced by e under the keys keys gives
// for either of them. The work is linear in the number of keys.
func reindex(index *immutable.Map[string, []*entry], old, e *entry, keys func(*entry) []string) *immutable.Map[string, []*entry] {
	var oldKeys, newKeys []string
	if old != nil {
		oldKeys = keys(old)
	}
	if e != nil {
		newKeys = keys(e)
	}
	kept := setOf(newKeys)
	for _, k := range oldKeys {
		index = reindexKey(index, k, old, e, kept.has(newKeys, k))
	}
	was := setOf(oldKeys)
	for _, k := range newKeys {
		if !was.has(oldKeys, k) {
			index = reindexKey(index, k, old, e, true)
		}
	}
	return index
}

// reindexKey returns index with old taken out of the list under k, and e
// put in if keep.
func reindexKey(index *immutable.Map[string, []*entry], k string, old, e *entry, keep bool) *immutable.Map[string, []*entry] {
	list, _ := index.Get(k)
	if list = swap(list, old, e, keep); len(list) == 0 {
		return index.Delete(k)
	}
	return index.Set(k, list)
}

// keySet is a set of an entry's keys (distinct, as parseHosts makes them):
// a map when there are more than a few, nil (a linear search of the list)
// otherwise.
type keySet map[string]struct{}

func setOf(list []string) keySet {
	if len(list) <= 8 {
		return nil
	}
	set := make(keySet, len(list))
	for _, k := range list {
		set[k] = struct{}{}
	}
	return set
}

// has reports whether list, of which set is setOf(list), holds k.
func (set keySet) has(list []string, k string) bool {
	if set == nil {
		return contains(list, k)
	}
	_, ok := set[k]
	return ok
}

// swap returns a copy of the name-sorted list without old and, if keep,
// with e in its place by name.
func swap(list []*entry, old, e *entry, keep bool) []*entry {
	out := make([]*entry, 0, len(list)+1)
	for _, x := range list {
		if x != old {
			out = append(out, x)
		}
	}
	if keep {
		i, _ := slices.BinarySearchFunc(out, e, byName)
		out = slices.Insert(out, i, e)
	}
	return out
}

func byName(a, b *entry) int {
	if c := strings.Compare(a.inst.Name, b.inst.Name); c != 0 {
		return c
	}
	return strings.Compare(a.inst.ID, b.inst.ID)
}

// logChange logs an instance joining or leaving the rotation, once per
// change (R6), and once each reason why a running instance gets no
// requests: a bad caddy.port (R3, once per value), no port at all, several
// networks and no choice (R11), a caddy.host label on a selector route
// (R2), unhealthy from its start. Only instances that a route or the
// permission could use (see relevant) are logged at info level and warned
// about; the others, at debug level.
func (c *Catalog) logChange(old, e *entry, gone string) {
	if e != nil {
		c.warnTypos(old, e)   // R13c: whether or not a route could use it
		c.warnRefused(old, e) // R2f
	}
	if e != nil && c.relevant(e) {
		c.warnNoRequests(old, e)
	}
	relevant := e != nil && c.relevant(e) || old != nil && c.relevant(old)
	log := c.logger.Info
	if !relevant {
		log = c.logger.Debug
	}
	logHostsChange(log, old, e)
	wasIn, isIn := c.inRotation(old), c.inRotation(e)
	switch {
	case isIn && !wasIn:
		why := "running"
		switch {
		case e.inst.Health == HealthHealthy:
			why = "running and healthy"
		case e.unverified():
			why = "running, though its port did not accept a connection in time"
		case e.probeGen != 0:
			why = "running and accepting connections"
		}
		log("instance joins rotation", zap.String("instance", e.inst.Name), zap.String("why", why))
		if relevant {
			c.tellLifecycle(Joined, e, why)
		}
	case wasIn && !isIn:
		why := gone
		if e != nil {
			if e.inst.State == StateStopping && e.note().stopWhy != "" {
				why = e.note().stopWhy // what the event said (R6b)
			} else if why = e.notRoutable(""); why == "" {
				why = c.verdict(e) // R3: no port
			}
		}
		log("instance leaves rotation", zap.String("instance", old.inst.Name), zap.String("why", why))
		if relevant {
			c.tellLifecycle(Left, old, why)
		}
	case e != nil && !isIn && e.inst.State == StateRunning && e.inst.Health == HealthUnhealthy &&
		(old == nil || old.inst.State != StateRunning || old.inst.Health != HealthUnhealthy):
		// Never in, so never left: said once, or it would go unnoticed.
		log("instance stays out of rotation", zap.String("instance", e.inst.Name), zap.String("why", "unhealthy"))
	}
}

// Change is what Options.Lifecycle hears of an instance (R13e).
type Change int

const (
	// Joined: it joins its rotations.
	Joined Change = iota + 1
	// Left: it leaves them.
	Left
	// Removed: the daemon removed it while it was on standby (R5o).
	Removed
)

// tellLifecycle tells Options.Lifecycle, if set, of change to e (R13e).
// c.mu is held.
func (c *Catalog) tellLifecycle(change Change, e *entry, why string) {
	if c.lifecycle != nil {
		c.lifecycle(change, e.inst, e.hosts, why)
	}
}

// warnNoRequests warns, once per cause, that e (which replaces old, nil:
// none) can get no requests, or fewer than its labels suggest.
func (c *Catalog) warnNoRequests(old, e *entry) {
	name := zap.String("instance", e.inst.Name)
	c.warnWeighting(old, e) // R4c, R4d
	c.warnPool(old, e)      // R5j, R5k
	c.warnActivity(old, e)  // R5r
	if bad := e.note().badStandby; bad != "" && (old == nil || old.inst.Labels[bad] != e.inst.Labels[bad]) {
		c.logger.Warn("instance is never put on standby nor woken by Caddy: label "+bad+
			" is not valid (caddy.standby_after: a positive duration such as 15m; caddy.standby: stop or pause)",
			name, zap.String(bad, e.inst.Labels[bad]))
	}
	if e.overCap && (old == nil || old.inst.Labels[LabelHost] != e.inst.Labels[LabelHost]) {
		label := e.inst.Labels[LabelHost]
		c.logger.Warn("instance claims no host: its caddy.host label is over the cap of "+
			strconv.Itoa(MaxHostNames)+" names and "+strconv.Itoa(MaxHostLabelBytes)+" bytes (R2c); it gets no requests",
			name, zap.Int("bytes", len(label)), zap.String("caddy.host", ClipLabel(label)))
	}
	if bad := e.note().badPath; bad != "" && (old == nil || old.inst.Labels[LabelPath] != e.inst.Labels[LabelPath] || old.inst.Labels[LabelStripPath] != e.inst.Labels[LabelStripPath]) {
		c.logger.Warn("instance serves no path: its caddy.path label is not valid (R2d): "+bad+"; it gets no requests",
			name, zap.String("caddy.path", ClipLabel(e.inst.Labels[LabelPath])), zap.String("caddy.strip_path", ClipLabel(e.inst.Labels[LabelStripPath])))
	}
	if e.port < 0 && (old == nil || old.inst.Labels[LabelPort] != e.inst.Labels[LabelPort]) {
		c.logger.Warn("instance gets no requests: label caddy.port is not a port number (1-65535)",
			name, zap.String("caddy.port", e.inst.Labels[LabelPort]))
	}
	if e.ambiguous && (old == nil || !old.ambiguous) {
		c.logger.Warn("instance is on several networks and has no caddy.network label: "+
			"routes without a network setting send it no requests",
			name, zap.Strings("networks", e.networkNames()))
	}
	if why := e.unreachable(); why != "" && (old == nil || old.unreachable() != why) {
		c.logger.Warn("instance gets no requests: "+why, name) // R11, R11h
	}
	noPort := func(x *entry) bool {
		return x.inst.State == StateRunning && x.port == 0 && x.onlyPort == 0 && len(c.routePorts) == 0
	}
	if noPort(e) && (old == nil || !noPort(old)) {
		c.logger.Warn("instance gets no requests: "+e.noPort(0)+
			" (give it a caddy.port label, or the route a port)", name)
	}
}

// warnHostOnSelector says that the selector route of v sends e requests
// only for the hosts its caddy.host label lists (R2): a request for any
// other host finds it excluded. It is said when e (which replaces old,
// nil: none) enters v with that label, or changes it while in v: publish
// and Replace, which work out who enters a view, call it.
func (c *Catalog) warnHostOnSelector(v *View, old, e *entry) {
	if !e.restricted || old != nil && old.inst.Labels[LabelHost] == e.inst.Labels[LabelHost] && v.sel.Matches(old.inst.Labels) {
		return
	}
	c.logger.Warn("instance has a caddy.host label: on a selector route it gets requests only for the hosts it lists",
		zap.String("instance", e.inst.Name), zap.String("selector", v.sel.String()),
		zap.String("caddy.host", ClipLabel(e.inst.Labels[LabelHost])))
}

// relevant reports whether a route or the permission could ever use e: it
// has a caddy.* label, or a watched selector matches it. The others (every
// other container on an Engine, say) are logged at debug level only. c.mu
// is held.
func (c *Catalog) relevant(e *entry) bool {
	if e.labelled {
		return true
	}
	for _, v := range c.views {
		if v.sel.Matches(e.inst.Labels) {
			return true
		}
	}
	return false
}

// inRotation reports whether e (nil: none) gets requests, whatever the
// route, as far as the catalog can tell: routable (R1) with a port (R3),
// its own or, if it names none, some route's. It is verdict(e) == "",
// without building the reason. c.mu is held.
func (c *Catalog) inRotation(e *entry) bool {
	return e != nil && e.routable("") && e.port >= 0 && (e.port > 0 || e.onlyPort > 0 || len(c.routePorts) > 0)
}

type hasher struct{ seed maphash.Seed }

func newHasher() *hasher { return &hasher{seed: maphash.MakeSeed()} }

func (h *hasher) Hash(key string) uint32 { return uint32(maphash.String(h.seed, key)) }

func (h *hasher) Equal(a, b string) bool { return a == b }

// Stopping implements Sink: the instance leaves its rotations at once, and
// stays out while later Puts still say it runs, until Started or a
// re-listing (Replace). The event is counted, whatever the state (see
// Sleeper.StopEvent).
func (c *Catalog) Stopping(id string) { c.StoppingBecause(id, "") }

// StoppingBecause is Stopping, with what the event said of why ("" for
// nothing): the log line of the leave says it, in place of "stopping".
func (c *Catalog) StoppingBecause(id, why string) {
	c.amend(id, true, func(e *entry) bool {
		c.seq++
		e.stopEvent = c.seq
		switch {
		case e.stopping:
		case e.inst.State == StateRunning, e.inst.State == StateStarting, e.inst.State == StateRestarting:
			e.inst.State, e.stopping = StateStopping, true
			e.setNotes(func(n *entryNotes) { n.stopWhy = why })
		}
		return true
	})
}

// CancelStopping undoes a Stopping made before a stop or pause that then
// failed (scale to zero): the instance, running all along, is back in its
// rotations.
func (c *Catalog) CancelStopping(id string) {
	c.amend(id, true, func(e *entry) bool {
		if !e.stopping || e.inst.State != StateStopping {
			return false
		}
		e.inst.State, e.stopping = StateRunning, false
		return true
	})
}

// Started implements Sink: it ends a Stopping, and is counted (see
// Sleeper.StartEvent); the next Put says how the instance is now.
func (c *Catalog) Started(id string) {
	c.amend(id, false, func(e *entry) bool {
		c.seq++
		e.stopping, e.startEvent = false, c.seq
		return true
	})
}

// amend replaces the entry of id, if the catalog has one, with a copy that
// change edits (under c.mu), and publishes it, logging the change when log
// is set; change returns false to leave the entry as it is.
func (c *Catalog) amend(id string, log bool, change func(e *entry) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.byID[id]
	if old == nil {
		return
	}
	e := *old
	if !change(&e) {
		return
	}
	c.byID[id] = &e
	c.tellFroze(old, &e) // a stop event (R5a)
	c.publish(c.current.Load(), old, &e)
	if log {
		c.logChange(old, &e, "")
	}
}

// holdStopping keeps an instance that an event said is stopping out of
// its rotations while its daemon still reports it running (an app
// draining after SIGTERM); it says whether it did.
func holdStopping(old *entry, inst *Instance) bool {
	if old == nil || !old.stopping || inst.State != StateRunning {
		return false
	}
	inst.State = StateStopping
	return true
}
