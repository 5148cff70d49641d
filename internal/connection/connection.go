// Package connection is one followed daemon, shared by every module that
// names it and kept across config reloads: its catalog, fed by the
// daemon's adapter, the readiness prober, how its instances wake and its
// pools grow (Scaling, chosen once when the connection is made), its
// status, metrics and issuance ledger, and the routes and permissions on
// it. Modules use it through methods and the small interfaces it declares
// (Route, Permission), never through its fields. It does not import Caddy:
// the pool that shares one Conn between modules by key is the caller's
// (package dicerapp).
package connection

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/budget"
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/heal"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
	"github.com/caddy-dicer/caddy-dicer/internal/readiness"
)

// Spec is what makes a connection.
type Spec struct {
	// Kind is the backend ("dicer", "docker", "swarm") and Address the
	// daemon's address: together they name the daemon in metrics, the
	// admin API and logs. Never a token.
	Kind, Address string
	// Catalog are the catalog's options; the connection sets Probe and
	// Froze. Its Logger is the connection's.
	Catalog catalog.Options
	// Run runs the daemon's adapter into sink until ctx ends.
	Run func(ctx context.Context, sink catalog.Sink)
	// ReadinessTimeout bounds the readiness probe of an instance (0: the
	// prober's default, R1a).
	ReadinessTimeout time.Duration
	// Scaling is how the daemon's instances wake and its pools grow.
	Scaling Scaling
	// ReturnMemory, if set, is called once the connection's first
	// listing, of at least BurstInstances instances, is applied and the
	// readiness probes it started have their verdicts: it
	// returns the heap the burst left behind to the operating system
	// (runtime/debug.FreeOSMemory), and reports whether it did (the
	// caller rate-limits it across connections). Nil: never.
	ReturnMemory func() bool
}

// BurstInstances is the least first listing after which a connection
// calls Spec.ReturnMemory: a listing that large, decoded, translated and
// probed at once, leaves the Go runtime a heap several times the live
// one, which it would otherwise keep resident (about 2.5 KB of RSS per
// instance beside 1.4 KB live, bench/scale); a smaller one is not worth
// a forced collection.
const BurstInstances = 5000

// Conn is one followed daemon (see the package documentation). Make it
// with New; Destruct stops it.
type Conn struct {
	kind, address string
	// logger is the connection's (its kind and address on every line).
	logger *zap.Logger

	catalog *catalog.Catalog
	prober  *readiness.Prober
	status  *followStatus
	metrics connMetrics
	// routes are the upstream sources on the connection, permissions its
	// on-demand TLS permissions, for the admin API and idle closing.
	routes      routeSet
	permissions permissionSet
	// learned are the hosts its selector routes held requests of, which
	// a ClientHello may pre-wake (R5n, prewake.go).
	learned learnedHosts
	// orders is the ledger of the issuance budgets of its permissions
	// (R7d): it outlives config reloads with the connection.
	orders *budget.Ledger
	// scale wakes instances and grows pools, as the daemon does it.
	scale scaler
	// fleet is what it shares with the other Caddys of a fleet (R5m),
	// made at the first ShareThrough.
	fleet     *fleet.Fleet
	fleetOnce sync.Once
	// fleetLoops are the goroutines that use the fleet (switches, sweep,
	// a Dicer pool's load): Destruct waits for them, then releases the
	// leases.
	fleetLoops sync.WaitGroup
	// switches are the fleet's runtime switches as applied here (R4e).
	switches fleetSwitches
	// runCtx ends when the connection closes.
	runCtx context.Context

	// started guards the start of the adapter and of settle, at the first
	// Await, or their never starting, at a Destruct before any Await.
	started sync.Once
	start   func(deadline time.Time)
	// settled is closed once the first listing and the readiness probes
	// it started are through, or at the first Await's deadline without
	// one: modules wait for it once per connection, not once each.
	settled chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	// woken counts the fast-path probes of woken instances (probeWoken).
	woken sync.WaitGroup
	// events carries the lifecycle events to Caddy's events app (R13e,
	// lifecycle.go).
	events *lifecycle.Bus
	// returning is returnBurst, waited for by Destruct.
	returning sync.WaitGroup
	// overflows is when each route last emitted dicer_queue_overflow
	// (lifecycle.go): at most one a second per route.
	overflows overflowLimit
}

// New makes the connection spec describes; it starts following the
// daemon at the first Await.
func New(spec Spec) (*Conn, error) {
	runCtx, cancel := context.WithCancel(context.Background())
	logger := spec.Catalog.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	c := &Conn{
		runCtx:  runCtx,
		kind:    spec.Kind,
		address: spec.Address,
		status:  newFollowStatus(),
		settled: make(chan struct{}),
		orders:  budget.New(),
		logger:  logger,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	c.metrics = newConnMetrics(c.kind, c.address)
	opts := spec.Catalog
	opts.Logger = logger
	opts.Probe = func(r catalog.ProbeRequest) { c.probe(runCtx, r, spec.ReadinessTimeout) } // R1a, and its fast path for a wake
	opts.Froze = func(string) { c.routes.closeIdle() }                                      // R5a
	opts.Lifecycle = c.catalogChanged                                                       // R13e
	opts.Refused = c.countRefused                                                           // R2f
	c.events = c.newBus()
	c.catalog = catalog.New(opts)
	c.prober = readiness.New(runCtx, spec.ReadinessTimeout, 0, c.markReady, logger)
	var err error
	if c.scale, err = spec.Scaling.make(runCtx, c); err != nil {
		cancel()
		c.orders.Close()
		return nil, err
	}
	trace := c.trace()
	var sink catalog.Sink = c.catalog
	if c.scale.healer != nil {
		sink = heal.Sink(c.catalog, c.scale.healer) // R1e: it sees what the catalog does
	}
	c.start = func(deadline time.Time) {
		go func() {
			defer close(c.done)
			spec.Run(follow.WithTrace(runCtx, trace), sink)
		}()
		go c.settle(runCtx, deadline)
		if spec.ReturnMemory != nil {
			c.returning.Go(func() { c.returnBurst(runCtx, spec.ReturnMemory) })
		}
	}
	return c, nil
}

// Destruct stops following the daemon; the pool calls it when the last
// module using the connection is cleaned up.
func (c *Conn) Destruct() error {
	c.started.Do(func() { // never started
		close(c.done)
		close(c.settled)
	})
	c.cancel()
	<-c.done
	c.events.Wait()
	c.prober.Wait()
	c.woken.Wait()
	c.returning.Wait()
	c.orders.Close()
	c.scale.close()
	c.releaseLeases()
	return nil
}

// Kind is the backend: "dicer", "docker" or "swarm".
func (c *Conn) Kind() string { return c.kind }

// Address is the daemon's address, never a token.
func (c *Conn) Address() string { return c.address }

// Logger is the connection's logger.
func (c *Conn) Logger() *zap.Logger { return c.logger }

// Catalog is the daemon's instances, as the adapter reports them.
func (c *Conn) Catalog() *catalog.Catalog { return c.catalog }

// Orders is the ledger of the issuance budgets of the connection's
// permissions (R7d).
func (c *Conn) Orders() *budget.Ledger { return c.orders }

// Await starts following the daemon if no module did yet, and returns once
// the connection has settled (listed, or given up to deadline to), or once
// deadline, the config load's, has passed (R9). ctx ending stops the wait,
// not the connection. In a fleet, the first Await returns once the
// fleet's switches have been read and applied too, or could not be in
// time (R4e, awaitSwitches).
func (c *Conn) Await(ctx context.Context, deadline time.Time) {
	c.started.Do(func() { c.start(deadline) })
	defer c.awaitSwitches(deadline)
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case <-c.settled:
	case <-wait.C:
		return
	case <-ctx.Done():
		return
	}
	// The route's Watch may have made instances relevant that no earlier
	// route of the connection watched (R1b), so the first settle did not
	// probe them: wait for their first attempts too, as settle does, for
	// at least settleGrace.
	grace := time.NewTimer(max(time.Until(deadline), settleGrace))
	defer grace.Stop()
	select {
	case <-c.prober.Idle():
	case <-grace.C:
	case <-ctx.Done():
	}
}

// markReady is the prober's verdict on an instance (R1a), counted.
func (c *Conn) markReady(id string, gen uint64, accepted bool) {
	if accepted {
		c.metrics.probesAccepted.Inc()
	} else {
		c.metrics.probesTimedOut.Inc()
	}
	c.catalog.MarkReady(id, gen, accepted)
}

// settleGrace is the least time a connection is given to settle, even when
// the config load that opened it has no time left to wait, so that a daemon
// that answers at once is not reported as not listed.
const settleGrace = 500 * time.Millisecond

// settle closes settled once the first listing and its readiness probes
// are through, or at the deadline of the config load that opened the
// connection (at least settleGrace from now), saying once that the daemon
// has not been listed yet. A later load then finds it settled and does not
// wait for it again.
func (c *Conn) settle(ctx context.Context, deadline time.Time) {
	defer close(c.settled)
	start := time.Now()
	timer := time.NewTimer(max(time.Until(deadline), settleGrace))
	defer timer.Stop()
	select {
	case <-c.catalog.Ready():
		// And for the first attempt of the readiness probe of every
		// instance it listed (R1a, R1b), so that a config loaded while
		// they run serves them from the first request; one that did not
		// accept at once is not waited for.
		select {
		case <-c.prober.Idle():
		case <-timer.C:
		case <-ctx.Done():
		}
	case <-timer.C:
		c.logger.Warn("daemon not listed yet; its routes answer 503 and its permission refuses until it is reached",
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
	case <-ctx.Done():
	}
}

// returnBurst calls returnMemory once the first listing is applied and
// the readiness probes it started have their verdicts (the prober
// drained: accepted, or timed out and warned about), if it listed at
// least BurstInstances instances: the resident memory then reflects the
// live heap, not the burst's peak.
func (c *Conn) returnBurst(ctx context.Context, returnMemory func() bool) {
	for _, ch := range []func() <-chan struct{}{c.catalog.Ready, c.prober.Drained} {
		select {
		case <-ch():
		case <-ctx.Done():
			return
		}
	}
	n := c.catalog.Len()
	if n < BurstInstances {
		return
	}
	start := time.Now()
	if returnMemory() {
		c.logger.Info("returned the first listing's memory to the operating system",
			zap.Int("instances", n), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	}
}

// Done is closed once the connection has stopped following the daemon
// (Destruct).
func (c *Conn) Done() <-chan struct{} { return c.done }
