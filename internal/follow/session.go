package follow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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
	streamErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamErr <- stream(func(e Event) {
			trace.eventReceived()
			switch {
			case e.DaemonWide:
				pending.Flag()
				return
			case e.Group != "":
				pending.AddGroup(e.Group)
				return
			case e.Stopping:
				// At once, not after the fetches queued before it: new
				// requests stop going there within the event's time.
				if s, ok := sink.(catalog.StoppingBecause); ok && e.Why != "" {
					s.StoppingBecause(e.ID, e.Why)
				} else {
					sink.Stopping(e.ID)
				}
			case e.Started:
				sink.Started(e.ID)
			}
			pending.Add(e.ID, e.Deleted)
		})
	}()
	defer func() {
		cancel()
		wg.Wait()
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

	s := &session{loop: l, conn: conn, sink: sink, trace: trace, known: make(map[string]catalog.Instance, len(listing.Instances))}
	for _, in := range listing.Instances {
		s.known[in.ID] = in
	}
	listedAt = l.now()
	sink.Replace(listing.Instances)
	msg := "connected to the " + l.Name
	if reconnect {
		msg = "reconnected to the " + l.Name
	}
	l.log().Info(msg, append([]zap.Field{zap.Int(l.Things, len(listing.Instances))}, listing.Fields...)...)
	trace.listed(len(listing.Instances), reconnect, lostCause)

	for {
		select {
		case <-ctx.Done():
			return listedAt, ctx.Err()
		case err := <-streamErr:
			return listedAt, err
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
		for id, ev := range ids {
			if err := s.apply(sctx, id, ev.Deleted); err != nil {
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

// apply brings one instance up to date: one Fetch per pending ID, whatever
// the number of instances; none for a deleted one.
func (s *session) apply(ctx context.Context, id string, deleted bool) error {
	if deleted {
		s.drop(id)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	in, err := s.conn.Fetch(cctx, id)
	cancel()
	if errors.Is(err, ErrNotFound) {
		s.drop(id)
		return nil
	}
	if err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = id
	}
	s.known[in.ID] = in
	s.sink.Put(in)
	s.loop.log().Debug(s.loop.Thing+" updated", zap.String(s.loop.Thing, in.Name), zap.String("id", in.ID),
		zap.Stringer("state", in.State), zap.Stringer("health", in.Health))
	return nil
}

// Same says whether a and b are the same in every field.
func Same(a, b catalog.Instance) bool {
	return a.ID == b.ID && a.Name == b.Name && a.State == b.State && a.Health == b.Health &&
		a.WakeOnConnect == b.WakeOnConnect && a.Group == b.Group && maps.Equal(a.Labels, b.Labels) &&
		slices.Equal(a.Networks, b.Networks) && slices.Equal(a.Ports, b.Ports)
}

func (s *session) drop(id string) {
	name := s.known[id].Name
	delete(s.known, id)
	s.sink.Delete(id)
	s.loop.log().Debug(s.loop.Thing+" removed", zap.String(s.loop.Thing, name), zap.String("id", id))
}
