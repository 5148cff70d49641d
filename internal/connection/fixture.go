package connection

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/budget"
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connectwake"
	"github.com/caddy-dicer/caddy-dicer/internal/readiness"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// Fixture is a connection that follows no daemon, around a catalog its
// maker feeds: for the tests and benchmarks of what reads a connection
// (the upstream sources, the permissions, the admin API). At most one of
// Standby and Grower is set.
type Fixture struct {
	Kind, Address string
	Catalog       *catalog.Catalog
	Standby       *standby.Waker
	Grower        *connectwake.Grower
}

// Conn is the fixture's connection. Its Await returns at once.
func (f Fixture) Conn() *Conn {
	c := &Conn{
		kind: f.Kind, address: f.Address, logger: zap.NewNop(), catalog: f.Catalog,
		status: newFollowStatus(), orders: budget.New(), settled: make(chan struct{}), done: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.runCtx = cancel, ctx
	c.metrics = newConnMetrics(f.Kind, f.Address)
	c.prober = readiness.New(ctx, 0, 0, c.markReady, c.logger)
	switch {
	case f.Standby != nil:
		c.scale = scaler{mode: scaleStandby, standby: f.Standby}
	case f.Grower != nil:
		c.scale = scaler{mode: scaleOnConnect, grower: f.Grower}
	}
	c.start = func(deadline time.Time) {
		close(c.done)
		close(c.settled)
	}
	return c
}
