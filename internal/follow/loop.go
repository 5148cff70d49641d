package follow

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Pace bounds the delays between sessions. There are two paces (R6):
//
//   - the re-list pace, after a session that reached the daemon: capped
//     exponential from Min to Max, started afresh only by a session that
//     lasted Stable after its listing. A daemon that keeps ending the
//     session soon after each listing (cutting it off for falling behind,
//     failing right after the list) so gets ever fewer full listings;
//   - the connect pace, after a session that could not reach the daemon at
//     all (End.Unreachable) before listing: capped exponential from Min to
//     ConnectMax, started afresh at each listing. A connection attempt to
//     an absent unix socket costs nothing, so a small ConnectMax there keeps
//     routes current within a second of the daemon's return, whatever the
//     outage's length.
type Pace struct {
	// Min and Max bound the re-list pace. Default: DefaultMinBackoff and
	// DefaultMaxBackoff.
	Min, Max time.Duration
	// ConnectMax caps the connect pace, at most Max. Default: Max.
	ConnectMax time.Duration
	// Stable is how long a session must last after its listing for the
	// re-list pace to start afresh. Default: DefaultStable.
	Stable time.Duration
}

// Default pace settings.
const (
	// DefaultStable: a daemon that cuts the session off more often than
	// this is re-listed ever less often.
	DefaultStable = 30 * time.Second
	// LocalConnectMax is the connect pace's cap for a daemon on a unix
	// socket, where a failed attempt costs nothing: the daemon's return is
	// noticed within it.
	LocalConnectMax = 500 * time.Millisecond
)

// Check says whether the pace's settings make sense.
func (p Pace) Check() error {
	if p.Min < 0 || p.Max < 0 || p.ConnectMax < 0 || p.Stable < 0 {
		return errors.New("backoff: must not be negative")
	}
	return nil
}

func (p Pace) withDefaults() Pace {
	if p.Min <= 0 {
		p.Min = DefaultMinBackoff
	}
	if p.Max <= 0 {
		p.Max = DefaultMaxBackoff
	}
	if p.Max < p.Min {
		p.Max = p.Min
	}
	if p.ConnectMax <= 0 || p.ConnectMax > p.Max {
		p.ConnectMax = p.Max
	}
	if p.Stable <= 0 {
		p.Stable = DefaultStable
	}
	return p
}

// Loop follows one daemon: it runs sessions one after the other, paced,
// until its context is done. It never clears the sink: what the last
// listing fed it stays through an outage, so the last known instances keep
// being routed to (R6).
type Loop struct {
	// Daemon is the adapter.
	Daemon Daemon
	// Name names the daemon in the log ("Dicer daemon", "Docker Engine");
	// Things and Thing name what it runs ("instances", "instance"). Things
	// is also the key of the count in the "connected" log line, Thing the
	// key of the name in the per-instance debug lines.
	Name, Things, Thing string
	// Address is the daemon's address, added to every log line as
	// "address".
	Address string
	// Pace bounds the delays between sessions.
	Pace Pace
	// Resync, if positive, is how often a session that follows the
	// daemon's events also re-lists every instance and applies only the
	// differences (a changed instance re-Put, a vanished one deleted):
	// for a daemon whose stream can lose events (the Docker Engine drops
	// them for a subscriber that falls behind) or stall while the daemon
	// still answers. When a re-listing finds a change and the stream
	// reported no event since the re-listing before, nor within
	// StallGrace after it, the stream is taken for stalled: the session
	// ends (ErrStalled) and the loop reconnects. Zero: no re-listing.
	Resync time.Duration
	// ResyncTimeout bounds each such re-listing; a daemon that does not
	// answer within it ends the session. Zero: DefaultResyncTimeout.
	ResyncTimeout time.Duration
	// StallGrace is how long after a re-listing that found a change the
	// stream has to report any event before it is taken for stalled (an
	// event may be on its way). Zero: DefaultStallGrace.
	StallGrace time.Duration

	logger *zap.Logger // set by Run

	// clock and sleep stand in for time in tests; nil means real time.
	clock func() time.Time
	sleep func(ctx context.Context, d time.Duration) bool
}

// Re-listing defaults (see Loop.Resync).
const (
	DefaultResyncTimeout = 10 * time.Second
	DefaultStallGrace    = 2 * time.Second
)

// ErrStalled ends a session whose connection is open but silent: a
// re-listing found changes the event stream never reported, or got no
// answer within Loop.ResyncTimeout. The error that ends the session wraps
// it and says which.
var ErrStalled = errors.New("stalled: the connection is open but nothing comes through")

func (l *Loop) resyncTimeout() time.Duration {
	if l.ResyncTimeout > 0 {
		return l.ResyncTimeout
	}
	return DefaultResyncTimeout
}

func (l *Loop) stallGrace() time.Duration {
	if l.StallGrace > 0 {
		return l.StallGrace
	}
	return DefaultStallGrace
}

// maxLoggedReasons bounds the set of failure messages already logged at
// error level during one outage.
const maxLoggedReasons = 64

func (l *Loop) log() *zap.Logger {
	if l.logger == nil {
		return zap.NewNop()
	}
	return l.logger
}

func (l *Loop) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// wait waits d, or until ctx is done (then false).
func (l *Loop) wait(ctx context.Context, d time.Duration) bool {
	if l.sleep != nil {
		return l.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run runs sessions feeding sink until ctx is done, logging to log (nil
// discards) why each ended. A Loop runs once.
func (l *Loop) Run(ctx context.Context, sink catalog.Sink, log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	l.logger = log.With(zap.String("address", l.Address))
	p := l.Pace.withDefaults()
	relist := NewBackoff(p.Min, p.Max)
	connect := NewBackoff(p.Min, p.ConnectMax)
	o := outage{logged: make(map[string]bool)}
	trace := traceFrom(ctx)
	for {
		listedAt, err := l.runSession(ctx, sink, o.everListed, trace, o.lostCause)
		if ctx.Err() != nil {
			return
		}
		e := l.Daemon.Explain(err)
		if errors.Is(err, ErrStalled) {
			e.Stalled = true
			e.Lost = "the connection to the " + l.Name + " stalled (open, but silent): " +
				"still routing to what the last listing found, reconnecting"
		}
		listed := !listedAt.IsZero()
		if listed {
			o.lostCause = RelistCause(e)
		}
		var delay time.Duration
		switch {
		case listed:
			connect.Reset()
			if l.now().Sub(listedAt) >= p.Stable {
				relist.Reset()
				o.cuts = 0
			} else {
				o.cuts++
			}
			delay = relist.Next()
		case e.Unreachable:
			delay = connect.Next()
		default:
			// The daemon answered, then failed or cut the session off
			// before the listing: as costly to it as a cut after one.
			delay = relist.Next()
		}
		l.logEnd(e, listed, delay, &o)
		trace.ended(e, listed, delay)
		if !l.wait(ctx, delay) {
			return
		}
	}
}

// outage is what the loop remembers across sessions for its logs.
type outage struct {
	// logged holds the failure reasons logged at error level since the
	// last listing.
	logged     map[string]bool
	everListed bool
	// lostCause is why the last session that had listed ended.
	lostCause string
	// cuts counts the sessions in a row that ended sooner than Stable
	// after their listing.
	cuts int
}

// logEnd says why a session ended. A session that had listed lost the
// daemon: a warning, unless the daemon refused this client; from the
// second session in a row that the daemon ended soon after its listing,
// one warning says it keeps doing so, and the next such ends are logged at
// debug level. A failure to get as far as a listing is logged at error
// level once per distinct reason until the next listing, then at debug
// level, so a daemon that stays down does not flood the log.
func (l *Loop) logEnd(e End, listed bool, delay time.Duration, o *outage) {
	log := l.log()
	fields := []zap.Field{zap.String("error", e.Reason), zap.Duration("retry_in", delay)}
	if e.Call != "" {
		fields = append(fields, zap.String("call", e.Call))
	}
	if listed {
		clear(o.logged)
		o.everListed = true
	}
	if listed && !e.Auth {
		switch {
		case o.cuts <= 1:
			msg := e.Lost
			if msg == "" {
				msg = "lost the " + l.Name + ": still routing to the last known " + l.Things + ", reconnecting"
			}
			log.Warn(msg, fields...)
		case o.cuts == 2:
			p := l.Pace.withDefaults()
			log.Warn("the "+l.Name+" keeps ending the session soon after each listing: re-listing ever less often, "+
				"until a session lasts "+p.Stable.String(), append(fields, zap.Duration("max_retry_in", p.Max))...)
		default:
			log.Debug("the "+l.Name+" ended the session soon after the listing again", fields...)
		}
		return
	}
	if o.logged[e.Reason] {
		log.Debug("still cannot follow the "+l.Name, fields...)
		return
	}
	if len(o.logged) >= maxLoggedReasons {
		clear(o.logged)
	}
	o.logged[e.Reason] = true
	if o.everListed {
		log.Error("cannot follow the "+l.Name+": still routing to the "+l.Things+" it last reported", fields...)
	} else {
		log.Error("cannot follow the "+l.Name+": none of its "+l.Things+" are routed to until this is fixed", fields...)
	}
}
