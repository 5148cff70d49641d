// Package follow is the daemon-neutral part of following a daemon's
// instances: the reconnect loop of a daemon adapter, the way it reports why
// a session ended (without flooding the log while a daemon stays down), its
// backoff, and the coalescing set of IDs an event stream leaves to fetch.
//
// An adapter (internal/dicer, internal/docker) supplies what is its own:
// one session (connect, subscribe, list, apply events) and how to explain
// the error that ended it.
package follow

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// End is why a session ended, as the adapter explains it.
type End struct {
	// Call is the daemon call at fault ("" if none); logged as "call".
	Call string
	// Reason is what a user can act on; logged as "error". It is also the
	// key that keeps a repeated failure from being logged at error level
	// more than once.
	Reason string
	// Auth says the daemon refused this client, which no reconnection
	// fixes: an error even after a listing.
	Auth bool
	// Lost, if set, replaces the warning logged when a session that had
	// listed ends ("lost the <Daemon>: ...").
	Lost string
}

// Loop follows one daemon: it runs sessions one after the other, with
// backoff between them, until its context is done. It never touches the
// sink the sessions feed: what the last listing fed it stays through an
// outage, so the last known instances keep being routed to.
type Loop struct {
	// Daemon and Things name the daemon and what it runs in the log:
	// "Dicer daemon" and "instances", "Docker Engine" and "containers".
	Daemon, Things string
	// Log receives why each session ended; nil discards it.
	Log *zap.Logger
	// Session is one connection. It returns whether it got the listing
	// (and fed it to the sink), and the error that ended it. reconnect is
	// true once an earlier session got a listing.
	Session func(ctx context.Context, reconnect bool) (listed bool, err error)
	// Explain turns the error that ended a session (nil if none) into an
	// End.
	Explain func(error) End
}

// maxLoggedReasons bounds the set of failure messages already logged at
// error level during one outage.
const maxLoggedReasons = 64

// Run runs sessions until ctx is done, waiting bo's delay after each. A
// session that got a listing resets bo and ends the outage.
func (l *Loop) Run(ctx context.Context, bo *Backoff) {
	logged := make(map[string]bool) // failure reasons logged at error level since the last listing
	everListed := false
	for {
		listed, err := l.Session(ctx, everListed)
		if ctx.Err() != nil {
			return
		}
		if listed {
			bo.Reset()
			clear(logged)
			everListed = true
		}
		delay := bo.Next()
		l.logEnd(l.Explain(err), listed, everListed, delay, logged)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// logEnd says why a session ended. A session that had listed lost the
// daemon: a warning, unless the daemon refused this client. A failure to
// get that far is logged at error level once per distinct reason until the
// next successful listing, then at debug level, so a daemon that stays down
// does not flood the log.
func (l *Loop) logEnd(e End, listed, everListed bool, delay time.Duration, logged map[string]bool) {
	log := l.Log
	if log == nil {
		log = zap.NewNop()
	}
	fields := []zap.Field{zap.String("error", e.Reason), zap.Duration("retry_in", delay)}
	if e.Call != "" {
		fields = append(fields, zap.String("call", e.Call))
	}
	if listed && !e.Auth {
		msg := e.Lost
		if msg == "" {
			msg = "lost the " + l.Daemon + ": still routing to the last known " + l.Things + ", reconnecting"
		}
		log.Warn(msg, fields...)
		return
	}
	if logged[e.Reason] {
		log.Debug("still cannot follow the "+l.Daemon, fields...)
		return
	}
	if len(logged) >= maxLoggedReasons {
		clear(logged)
	}
	logged[e.Reason] = true
	if everListed {
		log.Error("cannot follow the "+l.Daemon+": still routing to the "+l.Things+" it last reported", fields...)
	} else {
		log.Error("cannot follow the "+l.Daemon+": none of its "+l.Things+" are routed to until this is fixed", fields...)
	}
}
