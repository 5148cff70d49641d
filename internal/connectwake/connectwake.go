// Package connectwake grows the pools of a daemon that wakes instances on
// connect (Dicer, R5j): while every routable instance of a route has more
// requests in flight than its caddy.soft_limit, it opens, and closes, one
// TCP connection to the published port of the next instance on standby,
// the connection a request would make, and the daemon wakes it. It needs
// no write access to the daemon, and puts nothing on standby: the daemon's
// own standby_after does. No Caddy import.
package connectwake

import (
	"context"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

const (
	// RedialAfter is how long an instance connected to is not connected
	// to again, and counts as its route's growth under way while its
	// daemon still shows it on standby: a storm of loaded requests makes
	// one connection, and a wake that failed is tried again after it.
	RedialAfter = 10 * time.Second
	// MaxDialing bounds the connections being opened at once per Grower
	// (one per daemon connection).
	MaxDialing = 4
	// DialTimeout bounds the opening of one connection.
	DialTimeout = 5 * time.Second
	// maxRecent bounds the instances remembered as connected to: beyond
	// it, none is connected to until the oldest are forgotten.
	maxRecent = 1024
)

// Options are a Grower's hooks; every one may be left unset.
type Options struct {
	// Logger hears each growth (info) and each connection that failed
	// (warn); default none.
	Logger *zap.Logger
	// Started, if set, hears each growth as its connection starts.
	Started func()
	// Dial opens a connection; default a net.Dialer's DialContext.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Grower wakes the next instance on standby of loaded pools. Its methods
// are safe for concurrent use.
type Grower struct {
	ctx    context.Context
	cancel context.CancelFunc
	opts   Options

	mu      sync.Mutex
	recent  recent
	dialing int
	closed  bool
	wg      sync.WaitGroup
}

// New returns a Grower whose connections end with ctx or Close.
func New(ctx context.Context, opts Options) *Grower {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Dial == nil {
		d := &net.Dialer{}
		opts.Dial = d.DialContext
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	return &Grower{ctx: ctx, cancel: cancel, opts: opts, recent: recent{at: map[string]time.Time{}}}
}

// Grow wakes the next instance on standby of route for host (R5's order,
// see catalog.Snapshot.NextToConnect) when every one of targets, the
// route's routable instances, has more requests in flight than its
// caddy.soft_limit (R5j), in the background: one at a time per route, at
// most MaxDialing connections being opened, none to an instance connected
// to within RedialAfter. The request goes on to targets. It reads atomics
// only unless the pool is loaded, and reports whether it started a wake.
func (g *Grower) Grow(snap *catalog.Snapshot, route catalog.Route, host string, targets []catalog.Target) bool {
	if !catalog.Loaded(targets) {
		return false
	}
	now := g.opts.Now()
	g.mu.Lock()
	if g.closed || g.dialing >= MaxDialing {
		g.mu.Unlock()
		return false
	}
	g.recent.now = now
	next, ok := snap.NextToConnect(route, host, &g.recent)
	if ok && !g.recent.add(next.ID, now) {
		ok = false
	}
	if !ok {
		g.mu.Unlock()
		return false
	}
	g.dialing++
	g.wg.Add(1)
	g.mu.Unlock()
	g.opts.Logger.Info("every routable instance is past its caddy.soft_limit: connecting to the next one on standby, which its daemon wakes",
		zap.String("instance", next.Name), zap.String("dial", next.Dial), zap.Int("routable", len(targets)))
	if g.opts.Started != nil {
		g.opts.Started()
	}
	go g.connect(next)
	return true
}

// connect opens and closes one connection to w's published port.
func (g *Grower) connect(w catalog.ConnectWake) {
	defer g.wg.Done()
	defer func() {
		g.mu.Lock()
		g.dialing--
		g.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(g.ctx, DialTimeout)
	defer cancel()
	conn, err := g.opts.Dial(ctx, "tcp", w.Dial)
	if err != nil {
		if g.ctx.Err() == nil {
			g.opts.Logger.Warn("caddy.soft_limit: could not connect to the instance on standby to wake it; trying again later",
				zap.String("instance", w.Name), zap.String("dial", w.Dial), zap.Error(err))
		}
		return
	}
	_ = conn.Close()
}

// Waking reports whether the instance id was connected to, to wake it,
// within RedialAfter: its readiness probe may take the fast path.
func (g *Grower) Waking(id string) bool {
	now := g.opts.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent.now = now
	return g.recent.Recent(id)
}

// Close ends the connections being opened and waits for them; Grow then
// starts none.
func (g *Grower) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// recent is when each instance was last connected to, as of now. The
// Grower's mu guards it.
type recent struct {
	at  map[string]time.Time
	now time.Time
}

// Recent implements catalog.Recent: id was connected to within
// RedialAfter of now.
func (r *recent) Recent(id string) bool {
	t, ok := r.at[id]
	return ok && r.now.Sub(t) < RedialAfter
}

// add records id connected to at now, forgetting those connected to
// before RedialAfter when the list is full; it reports false when it is
// still full.
func (r *recent) add(id string, now time.Time) bool {
	if len(r.at) >= maxRecent {
		for k, t := range r.at {
			if now.Sub(t) >= RedialAfter {
				delete(r.at, k)
			}
		}
		if len(r.at) >= maxRecent {
			return false
		}
	}
	r.at[id] = now
	return true
}

// Interface guards
var _ catalog.Recent = (*recent)(nil)
