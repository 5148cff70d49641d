package caddydicer

import (
	"context"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/dicerapp"
	"github.com/caddy-dicer/caddy-dicer/internal/budget"
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/readiness"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
)

// open resolves daemon's settings and returns its shared connection (see
// dial) and the connection's key, for release. The caller tells the
// catalog what its route needs, then calls await.
func open(daemon daemonSettings) (*connection, string, error) {
	spec, err := resolve(daemon)
	if err != nil {
		return nil, "", err
	}
	c, err := dial(spec)
	if err != nil {
		return nil, "", err
	}
	return c, spec.key, nil
}

// startupWait bounds how long a config load waits for its daemons' first
// listings, so that a daemon which is down never stops Caddy from starting
// (R9). A load waits it at most once, however many of its daemons are down:
// see dicerapp.App.
const startupWait = dicerapp.StartupWait

// connections holds the shared daemon connections across config reloads,
// keyed by connSpec.key.
var connections = caddy.NewUsagePool()

// connection is one followed daemon: its catalog, fed by a background
// adapter whose lifetime belongs to the pool entry, not to any module.
type connection struct {
	// kind is the backend ("dicer", "docker", "swarm") and address the daemon's
	// address: together they name the daemon in metrics, the admin API
	// and logs. Never a token.
	kind, address string
	// logger is the connection's (its kind and address on every line).
	logger *zap.Logger

	catalog *catalog.Catalog
	prober  *readiness.Prober
	status  *followStatus
	metrics connMetrics
	// routes are the upstream sources on this connection, for the admin
	// API's explain.
	routes      routeSet
	permissions permissionSet
	// orders is the ledger of the issuance budgets of its permissions
	// (R7d, permission_budget.go): it outlives config reloads with the
	// connection.
	orders *budget.Ledger
	// standby wakes and puts on standby the instances labelled
	// caddy.standby_after; nil for a daemon that wakes on connect (Dicer).
	// standbyKey is the pool key of its Engine's shared state (R5f).
	standby    *standby.Waker
	standbyKey string
	// grower wakes the next instance on standby of a loaded pool by a
	// connection to its published port (R5j, grow.go) on a daemon that
	// wakes on connect (Dicer); nil on the others.
	grower *connectwake.Grower
	// scaler grows and shrinks pools by their replica count (Swarm,
	// R5j); nil for other daemons.
	scaler *swarm.Scaler

	// started guards the start of the adapter and of settle, at the first
	// await (after the first module told the catalog its views and route
	// ports, so that the first listing is logged knowing them), or their
	// never starting, at a Destruct before any await.
	started sync.Once
	start   func(deadline time.Time)
	// settled is closed once the first listing and the readiness probes
	// it started are through, or after startupWait without
	// one: modules wait for it once per connection, not once each.
	settled chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	// woken counts the fast-path probes of woken instances (probeWoken).
	woken sync.WaitGroup
}

// Destruct stops following the daemon; the pool calls it when the last
// module using the connection is cleaned up.
func (c *connection) Destruct() error {
	c.started.Do(func() { // never started
		close(c.done)
		close(c.settled)
	})
	c.cancel()
	<-c.done
	c.prober.Wait()
	c.woken.Wait()
	if c.orders != nil {
		c.orders.Close()
	}
	if c.grower != nil {
		c.grower.Close()
	}
	if c.standby != nil {
		c.standby.Close()
		release(c.standbyKey)
	}
	if c.scaler != nil {
		c.scaler.Close()
	}
	return nil
}

// dial returns the shared connection for spec, making it if needed; it
// starts following the daemon at the first await.
func dial(spec connSpec) (*connection, error) {
	v, _, err := connections.LoadOrNew(spec.key, func() (caddy.Destructor, error) {
		runCtx, cancel := context.WithCancel(context.Background())
		c := &connection{
			kind:    spec.kind,
			address: spec.address,
			status:  newFollowStatus(),
			settled: make(chan struct{}),
			orders:  budget.New(),
			logger:  spec.opts.Logger,
			cancel:  cancel,
			done:    make(chan struct{}),
		}
		c.metrics = newConnMetrics(c.kind, c.address)
		opts := spec.opts
		opts.Probe = func(r catalog.ProbeRequest) { c.probe(runCtx, r, spec.readinessTimeout, spec.opts.Logger) } // R1a, and its fast path for a wake
		opts.Froze = func(string) { c.routes.closeIdle() }                                                        // R5a, idleconns.go
		c.catalog = catalog.New(opts)
		c.prober = readiness.New(runCtx, spec.readinessTimeout, 0, c.markReady, spec.opts.Logger)
		if spec.actions != nil {
			var err error
			if c.standby, c.standbyKey, err = joinStandby(runCtx, c, spec); err != nil {
				cancel()
				return nil, err
			}
		}
		if spec.wakesOnConnect {
			c.grower = newGrower(runCtx, c, spec)
		}
		if spec.scaler != nil {
			var err error
			if c.scaler, err = spec.scaler(c.catalog, func() { c.metrics.wakesStarted(standby.CauseLoad).Inc() }); err != nil {
				cancel()
				return nil, err
			}
		}
		trace := c.trace()
		c.start = func(deadline time.Time) {
			go func() {
				defer close(c.done)
				spec.run(follow.WithTrace(runCtx, trace), c.catalog)
			}()
			go c.settle(runCtx, spec.opts.Logger, deadline)
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*connection), nil
}

// await starts following the daemon if no module did yet, and returns once
// the connection has settled (listed, or given startupWait to), or once
// the deadline of the config load ctx belongs to has passed (R9). ctx
// ending stops the wait, not the connection.
func (c *connection) await(ctx caddy.Context) error {
	app, err := dicerapp.Of(ctx)
	if err != nil {
		return err
	}
	deadline := app.Deadline()
	c.started.Do(func() { c.start(deadline) })
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case <-c.settled:
	case <-wait.C:
		return nil
	case <-ctx.Done():
		return nil
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
	return nil
}

// markReady is the prober's verdict on an instance (R1a), counted.
func (c *connection) markReady(id string, gen uint64, accepted bool) {
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
func (c *connection) settle(ctx context.Context, logger *zap.Logger, deadline time.Time) {
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
		logger.Warn("daemon not listed yet; its routes answer 503 and its permission refuses until it is reached",
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
	case <-ctx.Done():
	}
}

// release gives back a connection from dial, by its connSpec.key.
func release(key string) {
	if key != "" {
		_, _ = connections.Delete(key)
	}
}
