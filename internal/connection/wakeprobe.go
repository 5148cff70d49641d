package connection

import (
	"context"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/readiness"
)

// The readiness probe's fast path for an instance Caddy is waking (R5c,
// R5j): the prober (R1a) paces its attempts on everything it probes, and
// backs off to a fifth of the time waited after the first second, so an
// instance woken under load (a pool growing) could wait hundreds of
// milliseconds past its listening. A wake is rare and bounded
// (max_wakes), so its instance is also probed by a goroutine of its own:
// one attempt every wokenProbeEvery, from the catalog's request (the
// description after the start event) until it accepts, the wake ends or
// the readiness timeout passes. Its verdict goes to the catalog as the
// prober's would; the later one is ignored there.

const (
	// wokenProbeEvery is the pause between two attempts on a woken
	// instance.
	wokenProbeEvery = 2 * time.Millisecond
	// wokenAttemptTimeout bounds one attempt.
	wokenAttemptTimeout = 250 * time.Millisecond
)

// SetUnlearntPace makes the readiness probe ignore what it learnt of the
// images' start times (on) or use it (off): for measurements that take
// both in turns (R1a, readiness.Prober.SetUnlearntPace).
func (c *Conn) SetUnlearntPace(on bool) { c.prober.SetUnlearntPace(on) }

// probe sends r to the prober and, for an instance being woken, starts
// its fast path. The catalog calls it with its lock held: it does not
// block.
func (c *Conn) probe(ctx context.Context, r catalog.ProbeRequest, timeout time.Duration) {
	c.prober.Probe(r)
	if !c.waking(r.ID) {
		return
	}
	c.woken.Add(1)
	go func() {
		defer c.woken.Done()
		c.probeWoken(ctx, r, timeout)
	}()
}

// probeWoken tries r's dial addresses every wokenProbeEvery until one
// accepts (the instance is ready), the wake ends, the catalog has a
// verdict, or timeout (0: the prober's default) passes.
func (c *Conn) probeWoken(ctx context.Context, r catalog.ProbeRequest, timeout time.Duration) {
	if timeout <= 0 {
		timeout = readiness.DefaultTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	d := net.Dialer{Timeout: wokenAttemptTimeout}
	pause := time.NewTimer(0)
	defer pause.Stop()
	for attempts := 1; ; attempts++ {
		select {
		case <-pause.C:
		case <-ctx.Done():
			return
		}
		for _, addr := range r.Dials {
			if conn, err := d.DialContext(ctx, "tcp", addr); err == nil {
				_ = conn.Close()
				c.prober.Learn(r.Image, time.Since(start))
				if !c.catalog.InstanceReady(r.ID) {
					c.logger.Debug("woken instance accepts connections", zap.String("instance", r.Name), zap.String("dial", addr),
						zap.Int("attempts", attempts), zap.Duration("after", time.Since(start)))
					c.markReady(r.ID, r.Gen, true)
				}
				return
			}
		}
		if time.Now().After(deadline) || !c.waking(r.ID) || c.catalog.InstanceReady(r.ID) {
			return // the prober's verdict decides
		}
		pause.Reset(wokenProbeEvery)
	}
}
