// Package readiness checks that instances accept connections before they
// join rotations (R1a): for each catalog.ProbeRequest it tries a TCP
// connection to the instance's dial addresses a few milliseconds apart,
// until one is accepted or Timeout passes, then tells the catalog. It runs
// beside the daemon adapter, never on a request, and a probe stops as soon
// as the instance is ready.
package readiness

import (
	"context"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Defaults of a Prober.
const (
	// DefaultTimeout bounds how long an instance is held out of its
	// rotations waiting for its port.
	DefaultTimeout = 5 * time.Second
	// DefaultInterval is the pause between two connection attempts.
	DefaultInterval = 5 * time.Millisecond
	// attemptTimeout bounds one connection attempt (an address that drops
	// SYNs, say).
	attemptTimeout = 250 * time.Millisecond
)

// Prober probes instances for one catalog. Its zero value is not usable:
// call New.
type Prober struct {
	ctx      context.Context
	timeout  time.Duration
	interval time.Duration
	ready    func(id string, gen uint64, accepted bool)
	log      *zap.Logger

	mu      sync.Mutex
	running map[string]probe // by instance ID
	idle    chan struct{}    // closed while no probe runs
	wg      sync.WaitGroup
}

type probe struct {
	gen    uint64
	cancel context.CancelFunc
}

// New returns a Prober that reports to ready (catalog.MarkReady) and stops
// probing when ctx is done. timeout <= 0 means DefaultTimeout; interval
// <= 0 means DefaultInterval.
func New(ctx context.Context, timeout, interval time.Duration, ready func(id string, gen uint64, accepted bool), log *zap.Logger) *Prober {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = zap.NewNop()
	}
	idle := make(chan struct{})
	close(idle)
	return &Prober{ctx: ctx, timeout: timeout, interval: interval, ready: ready, log: log, running: make(map[string]probe), idle: idle}
}

// Idle returns a channel closed once no probe runs (at once if none does
// now). The connection waits on it after its first listing, so that a
// config loaded while instances run serves them from the first request.
func (p *Prober) Idle() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// Probe starts probing r's instance, replacing an earlier probe of it. It
// does not block (catalog.Options.Probe).
func (p *Prober) Probe(r catalog.ProbeRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.running[r.ID]; ok {
		old.cancel()
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	if len(p.running) == 0 {
		p.idle = make(chan struct{})
	}
	p.running[r.ID] = probe{gen: r.Gen, cancel: cancel}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.done(r, cancel)
		p.run(ctx, r)
	}()
}

// Wait returns once every probe has ended (after ctx is done, soon).
func (p *Prober) Wait() { p.wg.Wait() }

func (p *Prober) done(r catalog.ProbeRequest, cancel context.CancelFunc) {
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.running[r.ID]; ok && cur.gen == r.Gen {
		delete(p.running, r.ID)
		if len(p.running) == 0 {
			close(p.idle)
		}
	}
}

func (p *Prober) run(ctx context.Context, r catalog.ProbeRequest) {
	start := time.Now()
	var d net.Dialer
	timer := time.NewTimer(0)
	defer timer.Stop()
	attempts := 0
	for {
		select {
		case <-ctx.Done():
			if p.ctx.Err() != nil || ctx.Err() == context.Canceled {
				return // the connection closed, or a newer probe took over
			}
			p.log.Warn("instance did not accept a connection in time: it joins its rotations anyway; "+
				"give it a health check, or a longer readiness_timeout, if it starts slowly",
				zap.String("instance", r.Name), zap.Strings("tried", r.Dials), zap.Duration("waited", p.timeout))
			p.ready(r.ID, r.Gen, false)
			return
		case <-timer.C:
		}
		for _, dial := range r.Dials {
			attempts++
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			conn, err := d.DialContext(actx, "tcp", dial)
			cancel()
			if err == nil {
				_ = conn.Close()
				p.log.Debug("instance accepts connections", zap.String("instance", r.Name), zap.String("dial", dial),
					zap.Int("attempts", attempts), zap.Duration("after", time.Since(start)))
				p.ready(r.ID, r.Gen, true)
				return
			}
		}
		timer.Reset(p.interval)
	}
}
