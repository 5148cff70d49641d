package dicerapp

import (
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// The shared daemon connections: one per key (every setting that shapes
// it, hashed), reference-counted across config reloads. The modules that
// follow a daemon Dial it at provision and Release it at cleanup; the
// admin API and the metrics read Connections.

// connections holds the shared daemon connections across config reloads,
// keyed by the connection's key, and the scale-to-zero state of each
// Engine that several connections share (R5f).
var connections = &pool{UsagePool: caddy.NewUsagePool()}

// pool is the connections' pool, and when it last returned memory to the
// operating system for one of them (connection.Spec.ReturnMemory).
type pool struct {
	*caddy.UsagePool
	mu       sync.Mutex
	returned time.Time
}

// ReturnMemoryEvery is the least time between two returns of memory to
// the operating system in the process, whatever the connections that
// ask: a forced collection costs a full mark of the heap.
const ReturnMemoryEvery = 10 * time.Minute

// returnMemory returns the heap's free memory to the operating system,
// unless it did so less than ReturnMemoryEvery ago; it reports whether it
// did.
func (p *pool) returnMemory() bool {
	p.mu.Lock()
	if !p.returned.IsZero() && time.Since(p.returned) < ReturnMemoryEvery {
		p.mu.Unlock()
		return false
	}
	p.returned = time.Now()
	p.mu.Unlock()
	debug.FreeOSMemory()
	return true
}

// Dial returns the shared connection of key, made by spec if it is the
// first; Release(key) gives it back.
func Dial(key string, spec connection.Spec) (*connection.Conn, error) {
	if spec.ReturnMemory == nil {
		spec.ReturnMemory = connections.returnMemory
	}
	v, _, err := connections.LoadOrNew(key, func() (caddy.Destructor, error) {
		return connection.New(spec)
	})
	if err != nil {
		return nil, err
	}
	return v.(*connection.Conn), nil
}

// Release gives back a connection (or an Engine's shared state) by its
// key; "" is none.
func Release(key string) {
	if key != "" {
		_, _ = connections.Delete(key)
	}
}

// References is how many holders the connection of key has, for tests.
func References(key string) int {
	n, _ := connections.References(key)
	return n
}

// Connections returns the open daemon connections, by kind and address.
func Connections() []*connection.Conn {
	var out []*connection.Conn
	connections.Range(func(_, v any) bool {
		if c, ok := v.(*connection.Conn); ok && c != nil {
			out = append(out, c)
		}
		return true
	})
	slices.SortFunc(out, func(a, b *connection.Conn) int {
		if d := strings.Compare(a.Kind(), b.Kind()); d != 0 {
			return d
		}
		return strings.Compare(a.Address(), b.Address())
	})
	return out
}

// SharedEngine is the connection.SharedEngine of the Engine engine names:
// its scale-to-zero state, made by the first connection to it and shared
// by the others (R5f).
func SharedEngine(engine string) connection.SharedEngine {
	return func(actions standby.Actions) (*standby.Engine, func(), error) {
		key := "standby\x00" + engine
		v, _, err := connections.LoadOrNew(key, func() (caddy.Destructor, error) {
			return standby.NewEngine(actions), nil
		})
		if err != nil {
			return nil, nil, err
		}
		return v.(*standby.Engine), func() { Release(key) }, nil
	}
}

// Interface guards
var (
	_ caddy.Destructor = (*connection.Conn)(nil)
	_ caddy.Destructor = (*standby.Engine)(nil)
)

// RegisterMetrics registers the connections' metric collectors, and more,
// into the registry of ctx's config, once per registry.
func RegisterMetrics(ctx caddy.Context, more ...prometheus.Collector) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	for _, c := range append(connection.Collectors(Connections), more...) {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			caddy.Log().Named("dicer").Error("registering a metric", zap.Error(err))
		}
	}
}

// Adopt puts c, made elsewhere (a connection.Fixture), in the pool under
// key, as Dial would, for the tests of what reads the open connections;
// Release(key) takes it out.
func Adopt(key string, c *connection.Conn) error {
	_, _, err := connections.LoadOrNew(key, func() (caddy.Destructor, error) { return c, nil })
	return err
}

// Lookup is the open connection of key, nil if none, without taking a
// reference: for tests.
func Lookup(key string) *connection.Conn {
	var out *connection.Conn
	connections.Range(func(k, v any) bool {
		if k == key {
			out, _ = v.(*connection.Conn)
			return false
		}
		return true
	})
	return out
}

// Holders is how many modules hold the open connection c (0: it is not
// open): for tests that check modules share one.
func Holders(c *connection.Conn) int {
	n := 0
	connections.Range(func(k, v any) bool {
		if v == c {
			n, _ = connections.References(k)
			return false
		}
		return true
	})
	return n
}
