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
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
)

// The shared daemon connections: one per key (every setting that shapes
// it, hashed), reference-counted across config reloads. The modules that
// follow a daemon Dial it at provision and Release it at cleanup; the
// admin API and the metrics read Connections.

// connections holds the shared daemon connections across config reloads,
// keyed by the connection's key, and the scale-to-zero state of each
// Engine that several connections share (R5f).
var connections = &pool{UsagePool: caddy.NewUsagePool(), conns: make(map[string]*connection.Conn)}

// pool is the connections' pool, and when it last returned memory to the
// operating system for one of them (connection.Spec.ReturnMemory).
type pool struct {
	*caddy.UsagePool
	mu       sync.Mutex
	returned time.Time
	// conns are the connections Dial made, by key, for Connections: read
	// without the UsagePool's Range, which holds the pool's lock while it
	// waits for a value being made, while that value's constructor (a
	// connection's Scaling) may ask the pool for another (SharedEngine):
	// an admin request or a metrics scrape during a config load then
	// hung both for good. A key's entry goes when its last holder
	// releases it; an entry whose key has no holder is not listed.
	conns map[string]*connection.Conn
}

// remember notes c as key's connection.
func (p *pool) remember(key string, c *connection.Conn) {
	p.mu.Lock()
	p.conns[key] = c
	p.mu.Unlock()
}

// forget drops key's entry once the pool holds nothing under it.
func (p *pool) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, _ := p.References(key); n == 0 {
		delete(p.conns, key)
	}
}

// open is every connection of a key some module holds now.
func (p *pool) open() map[string]*connection.Conn {
	p.mu.Lock()
	out := make(map[string]*connection.Conn, len(p.conns))
	for k, c := range p.conns {
		out[k] = c
	}
	p.mu.Unlock()
	for k := range out {
		if n, _ := p.References(k); n == 0 {
			delete(out, k)
		}
	}
	return out
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
	c := v.(*connection.Conn)
	connections.remember(key, c)
	return c, nil
}

// Release gives back a connection (or an Engine's shared state) by its
// key; "" is none.
func Release(key string) {
	if key != "" {
		_, _ = connections.Delete(key)
		connections.forget(key)
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
	for _, c := range connections.open() {
		out = append(out, c)
	}
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

// SharedLoadBook is the swarm.LoadBook of the swarm manager engine names
// (swarm.Adapter.EngineKey): made by the first connection to it, shared
// by the others of this process, for the Scalers' load (R5j). Call
// release once done with it.
func SharedLoadBook(engine string) (book *swarm.LoadBook, release func(), err error) {
	key := "swarmload\x00" + engine
	v, _, err := connections.LoadOrNew(key, func() (caddy.Destructor, error) {
		return swarm.NewLoadBook(), nil
	})
	if err != nil {
		return nil, nil, err
	}
	return v.(*swarm.LoadBook), func() { Release(key) }, nil
}

// Interface guards
var (
	_ caddy.Destructor = (*connection.Conn)(nil)
	_ caddy.Destructor = (*standby.Engine)(nil)
	_ caddy.Destructor = (*swarm.LoadBook)(nil)
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
	if _, _, err := connections.LoadOrNew(key, func() (caddy.Destructor, error) { return c, nil }); err != nil {
		return err
	}
	connections.remember(key, c)
	return nil
}

// Lookup is the open connection of key, nil if none, without taking a
// reference: for tests.
func Lookup(key string) *connection.Conn {
	return connections.open()[key]
}

// Holders is how many modules hold the open connection c (0: it is not
// open): for tests that check modules share one.
func Holders(c *connection.Conn) int {
	for k, o := range connections.open() {
		if o == c {
			n, _ := connections.References(k)
			return n
		}
	}
	return 0
}
