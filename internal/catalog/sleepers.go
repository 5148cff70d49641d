package catalog

// The changes of sleepers (R5l): the idle loop of the connection that puts
// instances on standby looks only at the instances that changed, never at
// all of them, so that thousands of instances asleep cost nothing between
// their changes.

// sleeperFeed records which instances labelled for scale to zero (with an
// Activity) or with a caddy.depends_on changed since its reader last took
// them. It records nothing until a reader asks (SleeperChanges).
type sleeperFeed struct {
	on      bool
	changed map[string]struct{}
	signal  chan struct{} // capacity 1: a change is waiting to be taken
}

// tracked reports whether the feed follows e (nil: none).
func tracked(e *entry) bool {
	return e != nil && (e.activity != nil || e.pool.dependsOn != nil)
}

// noteSleeper records that the instance of old or e (either may be nil)
// changed, if the feed follows either. c.mu is held.
func (c *Catalog) noteSleeper(old, e *entry) {
	if !c.feed.on || !tracked(old) && !tracked(e) {
		return
	}
	id := ""
	if e != nil {
		id = e.inst.ID
	} else {
		id = old.inst.ID
	}
	c.feed.changed[id] = struct{}{}
	select {
	case c.feed.signal <- struct{}{}:
	default:
	}
}

// SleeperChanges returns the channel that receives a value when instances
// labelled for scale to zero (caddy.standby_after, caddy.soft_limit) or
// with a caddy.depends_on changed since the last TakeSleeperChanges. The
// first call starts the record, with every such instance as changed. A
// catalog has one reader of it: the idle loop of its connection.
func (c *Catalog) SleeperChanges() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.feed.on {
		c.feed = sleeperFeed{on: true, changed: map[string]struct{}{}, signal: make(chan struct{}, 1)}
		for _, e := range c.byID {
			c.noteSleeper(nil, e)
		}
	}
	return c.feed.signal
}

// SleeperChange is how one instance followed by SleeperChanges is now.
type SleeperChange struct {
	ID string
	// Sleeper is the instance, when IsSleeper: it is labelled
	// caddy.standby_after or caddy.soft_limit (as Catalog.Sleepers).
	Sleeper   Sleeper
	IsSleeper bool
	// Dependent is the instance, when it has a valid caddy.depends_on
	// (nil: none).
	Dependent *Dependent
}

// Gone reports an instance the catalog no longer has, or no longer
// labelled so that the feed follows it.
func (s SleeperChange) Gone() bool { return !s.IsSleeper && s.Dependent == nil }

// TakeSleeperChanges appends to dst how each instance that changed since
// the last call is now, and forgets them.
func (c *Catalog) TakeSleeperChanges(dst []SleeperChange) []SleeperChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.feed.changed {
		delete(c.feed.changed, id)
		ch := SleeperChange{ID: id}
		if e := c.byID[id]; e != nil {
			if e.activity != nil {
				ch.Sleeper, ch.IsSleeper = e.sleeper(), true
			}
			ch.Dependent = c.dependent(e)
		}
		dst = append(dst, ch)
	}
	if len(dst) > 1024 {
		c.feed.changed = map[string]struct{}{} // a Go map keeps its size: a re-listing's would stay
	}
	return dst
}

// Sleeper is the instance id as Sleepers reports it, if it is one.
func (c *Catalog) Sleeper(id string) (Sleeper, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil || e.activity == nil {
		return Sleeper{}, false
	}
	return e.sleeper(), true
}

// sleeper is e as Sleepers reports it; e has an Activity.
func (e *entry) sleeper() Sleeper {
	return Sleeper{
		ID: e.inst.ID, Name: e.inst.Name, Labels: e.inst.Labels, State: e.inst.State,
		Policy: e.standby, Activity: e.activity, Seq: e.seq, StartEvent: e.startEvent, StopEvent: e.stopEvent,
		Ready: e.ready(),
	}
}
