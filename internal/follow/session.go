package follow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// session is one connection to the daemon: what it knows, used only by the
// goroutine that runs it.
type session struct {
	loop  *Loop
	conn  Conn
	sink  catalog.Sink
	trace *Trace
	known map[string]catalog.Instance // what the sink was fed, by ID
	// received counts the events the stream reported; lastResync is its
	// value at the last re-listing.
	received   *atomic.Int64
	lastResync int64
	// holds are the instances a Stopping event holds out of their
	// rotations while the daemon reports them running, each until when
	// (StopBound).
	holds map[string]time.Time
	marks *marks
}

// runSession runs one session: subscribe, then list and Replace the sink's
// contents, then apply each event by fetching the one instance it names.
// It returns when the listing was fed to the sink (zero if it never was)
// and the error that ended the session.
func (l *Loop) runSession(ctx context.Context, sink catalog.Sink, reconnect bool, trace *Trace, lostCause string) (listedAt time.Time, err error) {
	conn, err := l.Daemon.Connect(ctx, l.log())
	if err != nil {
		if call, _ := Call(err); call == "" {
			err = WrapCall("connect", err)
		}
		return time.Time{}, err
	}
	defer func() { _ = conn.Close() }()

	sctx, cancel := context.WithCancel(ctx)
	// Subscribe before listing so that nothing is missed.
	stream, err := conn.Subscribe(sctx)
	if err != nil {
		cancel()
		return time.Time{}, err
	}
	pending := NewPending()
	marks := newMarks()
	var received atomic.Int64 // events the stream reported
	streamErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		marks.run(sctx, sink)
	}()
	go func() {
		defer wg.Done()
		// This goroutine only reads: it never waits on the sink, so a slow
		// catalog cannot make the daemon drop events for it.
		streamErr <- stream(func(e Event) {
			received.Add(1)
			trace.eventReceived()
			switch {
			case e.DaemonWide:
				pending.Flag()
				return
			case e.Group != "":
				pending.AddGroup(e.Group)
				return
			case e.Stopping:
				// Before the fetches queued before it: new requests stop
				// going there within the event's time.
				marks.set(e.ID, true, e.Why)
			case e.Started:
				marks.set(e.ID, false, "")
			}
			pending.AddEvent(e)
		})
	}()
	defer func() {
		cancel()
		wg.Wait()
		marks.apply(sink) // those the stream reported last: never lost
	}()

	lctx, lcancel := context.WithTimeout(sctx, ListTimeout)
	listing, err := conn.List(lctx)
	lcancel()
	// The subscription's own failure (the daemon is down, refuses this
	// client, cut it off) says more than the listing's, and a listing
	// that the stream no longer follows is not fed to the sink.
	select {
	case err := <-streamErr:
		return time.Time{}, err
	default:
	}
	if err != nil {
		return time.Time{}, err
	}

	s := &session{loop: l, conn: conn, sink: sink, trace: trace, known: make(map[string]catalog.Instance, len(listing.Instances)), received: &received,
		holds: map[string]time.Time{}, marks: marks}
	for _, in := range listing.Instances {
		s.known[in.ID] = in
	}
	listedAt = l.now()
	sink.Replace(listing.Instances)
	msg := "connected to the " + l.Name
	if reconnect {
		msg = "reconnected to the " + l.Name
	}
	fields := append([]zap.Field{zap.Int(l.Things, len(listing.Instances))}, listing.Fields...)
	if !listing.Version.Zero() {
		fields = append(fields, zap.Stringer("version", listing.Version))
	}
	l.log().Info(msg, fields...)
	trace.version(listing.Version)
	trace.listed(len(listing.Instances), reconnect, lostCause)

	var resync, stall <-chan time.Time
	if l.Resync > 0 {
		t := time.NewTicker(l.Resync)
		defer t.Stop()
		resync = t.C
	}
	stallTimer := time.NewTimer(time.Hour)
	stallTimer.Stop()
	defer stallTimer.Stop()
	suspect := int64(-1) // the event count when a re-listing found unreported changes
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	defer holdTimer.Stop()
	for {
		var holdC <-chan time.Time
		if at, ok := s.nextHold(); ok {
			holdTimer.Reset(time.Until(at))
			holdC = holdTimer.C
		}
		select {
		case <-holdC:
			if err := s.endHolds(sctx); err != nil {
				return listedAt, err
			}
			continue
		case <-ctx.Done():
			return listedAt, ctx.Err()
		case err := <-streamErr:
			return listedAt, err
		case <-resync:
			found, err := s.resync(sctx)
			if err != nil {
				return listedAt, err
			}
			if found && suspect < 0 {
				suspect = s.lastResync
				stallTimer.Reset(l.stallGrace())
				stall = stallTimer.C
			}
			continue
		case <-stall:
			stall = nil
			if received.Load() == suspect {
				trace.stalled()
				return listedAt, WrapCall("Events", fmt.Errorf("%w: a re-listing found changes the event stream did not report", ErrStalled))
			}
			suspect = -1
			continue
		case <-pending.Notify():
		}
		ids, daemonWide, flaggedAt := pending.Take()
		if daemonWide {
			if err := s.refresh(sctx); err != nil {
				return listedAt, err
			}
			trace.eventApplied(flaggedAt)
		}
		for group := range pending.TakeGroups() {
			if err := s.sync(sctx, group); err != nil {
				return listedAt, err
			}
		}
		fetched := s.prefetch(sctx, ids)
		for id, ev := range ids {
			if err := s.apply(sctx, id, ev, fetched[id]); err != nil {
				return listedAt, err
			}
			trace.eventApplied(ev.Received)
		}
	}
}

// refresh re-Puts the known instances a daemon-wide change changed.
func (s *session) refresh(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	changed, err := s.conn.Refresh(cctx, s.known)
	cancel()
	if err != nil {
		return err
	}
	for _, in := range changed {
		s.known[in.ID] = in
		s.sink.Put(in)
	}
	return nil
}

// resync re-lists every instance (Loop.Resync) and applies only the
// differences. found is set when it found a change although the stream
// reported no event since the re-listing before: the stream may be stalled.
func (s *session) resync(ctx context.Context) (found bool, err error) {
	before := s.received.Load()
	silent := before == s.lastResync
	s.lastResync = before
	lctx, cancel := context.WithTimeout(ctx, s.loop.resyncTimeout())
	listing, err := s.conn.List(lctx)
	timedOut := lctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
	cancel()
	if err != nil {
		call, _ := Call(err)
		if call == "" {
			call = "re-listing"
		}
		if timedOut {
			// A daemon that answers nothing on this connection: its stream
			// may be as silent.
			s.trace.stalled()
			return false, WrapCall(call, fmt.Errorf("%w: a re-listing got no answer within %v", ErrStalled, s.loop.resyncTimeout()))
		}
		return false, WrapCall(call, err)
	}
	changed, gone := s.applyListing(listing.Instances)
	s.trace.resynced(changed, gone)
	if changed+gone == 0 {
		return false, nil
	}
	s.loop.log().Debug("re-listing found changes", zap.Int("changed", changed), zap.Int("gone", gone),
		zap.Bool("stream_silent", silent))
	return silent, nil
}

// applyListing feeds the sink what differs between a listing and what it
// was fed: changed or new instances Put, vanished ones deleted.
func (s *session) applyListing(list []catalog.Instance) (changed, gone int) {
	seen := make(map[string]struct{}, len(list))
	for _, in := range list {
		seen[in.ID] = struct{}{}
		if old, ok := s.known[in.ID]; ok && Same(old, in) {
			continue
		}
		changed++
		s.known[in.ID] = in
		s.sink.Put(in)
	}
	for id := range s.known {
		if _, ok := seen[id]; !ok {
			gone++
			s.drop(id)
		}
	}
	return changed, gone
}

// sync brings one group up to date: one GroupConn.Sync per pending group.
func (s *session) sync(ctx context.Context, group string) error {
	gc, ok := s.conn.(GroupConn)
	if !ok {
		return fmt.Errorf("the stream named the group %q, but the connection has no groups", group)
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	current, gone, err := gc.Sync(cctx, group)
	cancel()
	if err != nil {
		return err
	}
	for _, id := range gone {
		if _, known := s.known[id]; known {
			s.drop(id)
		}
	}
	changed := 0
	for _, in := range current {
		if old, ok := s.known[in.ID]; ok && Same(old, in) {
			continue // a re-listing finds most of a group unchanged
		}
		changed++
		s.known[in.ID] = in
		s.sink.Put(in)
	}
	s.loop.log().Debug("group synced", zap.Int("changed", changed), zap.String("group", group), zap.Int(s.loop.Things, len(current)), zap.Int("gone", len(gone)))
	return nil
}

// fetchTimeout bounds one Fetch: CallTimeout, or ResyncTimeout on a
// connection that is checked for stalls (Loop.Resync set, R6c).
func (s *session) fetchTimeout() time.Duration {
	if s.loop.Resync > 0 {
		return min(CallTimeout, s.loop.resyncTimeout())
	}
	return CallTimeout
}

// prefetch makes the daemon calls of a batch of pending IDs at once, up
// to PrefetchWorkers at a time, when the connection is a Prefetcher and
// the batch has more than one ID to fetch: a burst of starts (a tenant
// scaling up by a hundred) then costs the other IDs of the batch the
// daemon's answer time once per PrefetchWorkers calls, not once per call
// before them. The results are finished one at a time by apply, in the
// session's goroutine. Nil when there is nothing to do at once.
func (s *session) prefetch(ctx context.Context, ids map[string]PendingEvent) map[string]*prefetched {
	pf, ok := s.conn.(Prefetcher)
	if !ok {
		return nil
	}
	var todo []string
	for id, ev := range ids {
		if !ev.Deleted {
			todo = append(todo, id)
		}
	}
	if len(todo) < 2 {
		return nil
	}
	out := make(map[string]*prefetched, len(todo))
	for _, id := range todo {
		out[id] = &prefetched{}
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(PrefetchWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				r := out[id] // written by this worker only; read after Wait
				cctx, cancel := context.WithTimeout(ctx, s.fetchTimeout())
				r.raw, r.err = pf.Inspect(cctx, id)
				r.timedOut = cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
				cancel()
			}
		}()
	}
	for _, id := range todo {
		work <- id
	}
	close(work)
	wg.Wait()
	return out
}

// PrefetchWorkers is how many daemon calls of one batch of events a
// session makes at once (prefetch).
const PrefetchWorkers = 8

// prefetched is one ID's daemon call made by prefetch.
type prefetched struct {
	raw      any
	err      error
	timedOut bool
}

// apply brings one instance up to date: one Fetch per pending ID, whatever
// the number of instances; none for a deleted one. pre, when not nil, is
// the daemon's answer prefetch got for it, finished here.
func (s *session) apply(ctx context.Context, id string, ev PendingEvent, pre *prefetched) error {
	if ev.Deleted {
		delete(s.holds, id)
		s.drop(id)
		return nil
	}
	var (
		in       catalog.Instance
		err      error
		timedOut bool
	)
	if pre != nil {
		in, err = s.conn.(Prefetcher).Finish(id, pre.raw, pre.err)
		timedOut = pre.timedOut
	} else {
		cctx, cancel := context.WithTimeout(ctx, s.fetchTimeout())
		in, err = s.conn.Fetch(cctx, id)
		timedOut = cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
	}
	if err != nil && timedOut && s.loop.Resync > 0 {
		// As for a re-listing: a daemon that answers nothing on this
		// connection within ResyncTimeout is stalled, and a session that
		// waited CallTimeout for it would route on stale state as long.
		s.trace.stalled()
		return WrapCall("Fetch", fmt.Errorf("%w: a fetch got no answer within %v: %v", ErrStalled, s.fetchTimeout(), err))
	}
	if errors.Is(err, ErrNotFound) {
		s.drop(id)
		return nil
	}
	if errors.Is(err, ErrUnusable) {
		return nil // the adapter said why; the sink keeps what it has
	}
	if err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = id
	}
	if old, ok := s.known[in.ID]; ok && Same(old, in) && !ev.Stopping && !ev.Started {
		// An event that changed nothing reported (Podman sends a
		// health_status event at every check, R11p) costs no write.
		return nil
	}
	s.known[in.ID] = in
	s.sink.Put(in)
	if sb, ok := s.conn.(StopBound); ok && ev.Stopping && in.State == catalog.StateRunning {
		if _, held := s.holds[id]; !held {
			if bound := sb.StopBound(id); bound > 0 {
				s.holds[id] = time.Now().Add(bound)
			}
		}
	} else if ev.Started || in.State != catalog.StateRunning {
		delete(s.holds, id) // started again, or stopped: the hold is over
	}
	s.loop.log().Debug(s.loop.Thing+" updated", zap.String(s.loop.Thing, in.Name), zap.String("id", in.ID),
		zap.Stringer("state", in.State), zap.Stringer("health", in.Health))
	return nil
}

// nextHold is when the first hold ends.
func (s *session) nextHold() (time.Time, bool) {
	var first time.Time
	for _, at := range s.holds {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// endHolds fetches each instance whose hold is past: one still running
// ignored its stop signal, so the hold ends (Sink.Started) and it is
// back in its rotations; one that is not has its state Put.
func (s *session) endHolds(ctx context.Context) error {
	now := time.Now()
	for id, at := range s.holds {
		if at.After(now) {
			continue
		}
		delete(s.holds, id)
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		in, err := s.conn.Fetch(cctx, id)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound):
			s.drop(id)
			continue
		case errors.Is(err, ErrUnusable):
			continue
		case err != nil:
			return err
		}
		if in.ID == "" {
			in.ID = id
		}
		s.known[in.ID] = in
		s.sink.Put(in)
		if in.State == catalog.StateRunning {
			s.marks.set(id, false, "")
			s.loop.log().Info(s.loop.Thing+" still running after its stop signal and stop timeout: back in its rotations",
				zap.String(s.loop.Thing, in.Name), zap.String("id", id))
		}
	}
	return nil
}

// Same says whether a and b are the same in every field.
func Same(a, b catalog.Instance) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Identity == b.Identity && a.Image == b.Image && a.State == b.State && a.Health == b.Health &&
		a.WakeOnConnect == b.WakeOnConnect && a.Group == b.Group && maps.Equal(a.Labels, b.Labels) &&
		slices.Equal(a.Networks, b.Networks) && slices.Equal(a.Ports, b.Ports)
}

func (s *session) drop(id string) {
	name := s.known[id].Name
	delete(s.known, id)
	s.sink.Delete(id)
	s.loop.log().Debug(s.loop.Thing+" removed", zap.String(s.loop.Thing, name), zap.String("id", id))
}

// marks hands the stream's Stopping and Started marks to the sink from a
// goroutine of its own, coalesced by instance (the last mark wins), so that
// the stream never waits on the sink: the Docker Engine drops events for
// a subscriber that stops reading (its queue of 1024 full for 100 ms).
type marks struct {
	mu      sync.Mutex
	pending map[string]mark // by instance ID
	notify  chan struct{}
}

// mark is one instance's latest mark: stopping (with why, as the event
// told it, "" if it did not) or started.
type mark struct {
	stopping bool
	why      string
}

func newMarks() *marks {
	return &marks{pending: make(map[string]mark), notify: make(chan struct{}, 1)}
}

// set records the latest mark of id. A stopping mark after a stopping mark
// not applied yet keeps the first one's why: the events of one stop come
// in order (a kill with SIGKILL, then the die with code 137) and the first
// says what happened, as the catalog logs it when the marks are applied
// one by one; a busy runner must not turn "killed with SIGKILL" into
// "exited with code 137".
func (m *marks) set(id string, stopping bool, why string) {
	m.mu.Lock()
	if prev, ok := m.pending[id]; ok && stopping && prev.stopping && prev.why != "" {
		why = prev.why
	}
	m.pending[id] = mark{stopping: stopping, why: why}
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

func (m *marks) take() map[string]mark {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 {
		return nil
	}
	p := m.pending
	m.pending = make(map[string]mark)
	return p
}

// run applies the marks to sink as they come until ctx is done.
func (m *marks) run(ctx context.Context, sink catalog.Sink) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.notify:
		}
		m.apply(sink)
	}
}

// apply applies the marks taken so far.
func (m *marks) apply(sink catalog.Sink) {
	for id, mk := range m.take() {
		switch s, ok := sink.(catalog.StoppingBecause); {
		case mk.stopping && ok && mk.why != "":
			s.StoppingBecause(id, mk.why)
		case mk.stopping:
			sink.Stopping(id)
		default:
			sink.Started(id)
		}
	}
}
