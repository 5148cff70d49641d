package fleet

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Health says once that the fleet's storage fails, with what that means
// for its caller, and once that it works again: a storage away for a while
// is two log lines, not one per call.
type Health struct{ failing atomic.Bool }

// Failed notes a failed call; the first since the storage last worked is
// logged as a warning, msg and err.
func (h *Health) Failed(log *zap.Logger, msg string, err error) {
	if !h.failing.Swap(true) && log != nil {
		log.Warn(msg, zap.Error(err))
	}
}

// Works notes a call that worked; after failures it is logged once.
func (h *Health) Works(log *zap.Logger) {
	if h.failing.Swap(false) && log != nil {
		log.Info("the fleet's storage works again")
	}
}

// ShareLoad writes this Caddy's requests in flight to what key names (an
// instance of a pool, or a service), as a lease renewed every every, when
// it has some or had some at its last write (published, by key, is the
// caller's record of those writes), and returns the other Caddys' (see
// OthersInFlight): the fleet's load beyond this Caddy's (R5j). A failed
// write still reads; op says which call failed ("read": others is
// unknown, "write": others holds).
func (f *Fleet) ShareLoad(ctx context.Context, key string, own int, published map[string]int, every time.Duration, now time.Time) (others int, op string, err error) {
	var werr error
	if own > 0 || published[key] > 0 {
		l := Lease{LastUse: now.Round(0), InFlight: own, Expires: now.Add(LeaseTTL(every)).Round(0)}
		if werr = f.Publish(ctx, key, l); werr == nil {
			published[key] = own
		}
	}
	if others, err = f.OthersInFlight(ctx, key, 0, now); err != nil {
		return 0, "read", err
	}
	if werr != nil {
		return others, "write", werr
	}
	return others, "", nil
}
