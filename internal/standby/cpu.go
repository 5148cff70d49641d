package standby

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// The CPU veto (R5r): a container labelled caddy.standby_cpu=<percent>
// that is due for standby (no request for its standby_after, none in
// flight) is read once from the Engine first, and kept awake while its
// CPU, in percent of one core, is above the label's value. It is read
// only then, by the worker that would put it on standby, never on the
// request path; at most maxCPUReads reads run at once per Engine, each
// bounded by cpuReadTimeout, and an instance kept awake is read again no
// sooner than cpuRecheck later, so a tenant's labels cost at most
// maxCPUReads reads at a time, whatever their number and values.

// CPUReader is what an Engine's Actions may also do: read a container's
// CPU time (R5r). Actions without it leave caddy.standby_cpu without
// effect.
type CPUReader interface {
	// CPU reads the CPU time the container has used, as the Engine
	// samples it, refused for a container without caddy.standby_cpu.
	CPU(ctx context.Context, id string, labels map[string]string) (CPUSample, error)
}

// CPUSample is the Engine's reading of a container's CPU time: Used since
// the container started, read at At, and its reading before that
// (PrevUsed at PrevAt, about a second earlier; PrevAt zero: none). Times
// are the Engine's.
type CPUSample struct {
	Used, PrevUsed time.Duration
	At, PrevAt     time.Time
}

const (
	// maxCPUReads bounds the CPU reads in flight per Engine.
	maxCPUReads = 4
	// cpuReadTimeout bounds one read (the Engine's answer takes about a
	// second: it waits for its next sample).
	cpuReadTimeout = 5 * time.Second
)

// cpuRecheck is how long an instance its CPU keeps awake stays so before
// it is read again: a quarter of its standby_after, between 1 s and a
// minute, so that it goes on standby within that (and a read) of its CPU
// falling.
func cpuRecheck(after time.Duration) time.Duration {
	return min(max(after/4, time.Second), time.Minute)
}

// cpuState is what the Engine remembers of one instance's CPU (R5r), in
// its sharedActivity: the last reading, and until when the instance is
// kept awake by it (the Waker's clock).
type cpuState struct {
	last    CPUSample
	holding time.Time
}

// cpuHeldUntil is until when the CPU of id keeps it awake (zero: not).
func (e *Engine) cpuHeldUntil(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sa := e.shared[id]; sa != nil && sa.cpu != nil {
		return sa.cpu.holding
	}
	return time.Time{}
}

// CPUPercent is the CPU of a container in percent of one core (100: one
// core busy all the time) from cur, its reading now, and prev, the one
// remembered from the last look (zero: none): over the time between them
// when prev is at most window older (and the container did not restart
// meanwhile), else over the Engine's own last period (about a second,
// cur's Prev fields). ok is false when neither gives a time to divide by.
func CPUPercent(prev, cur CPUSample, window time.Duration) (pct float64, over time.Duration, ok bool) {
	if !prev.At.IsZero() && cur.At.After(prev.At) && cur.At.Sub(prev.At) <= window && cur.Used >= prev.Used {
		over = cur.At.Sub(prev.At)
		return float64(cur.Used-prev.Used) / float64(over) * 100, over, true
	}
	if !cur.PrevAt.IsZero() && cur.At.After(cur.PrevAt) && cur.Used >= cur.PrevUsed {
		over = cur.At.Sub(cur.PrevAt)
		return float64(cur.Used-cur.PrevUsed) / float64(over) * 100, over, true
	}
	return 0, 0, false
}

// cpuKeepsAwake reads the CPU of s, due for standby, and reports whether
// it keeps s awake (above its caddy.standby_cpu): then s is not looked at
// again before cpuRecheck. Past maxCPUReads reads at once, or when the
// read times out, s is kept awake that long unread. A read the Engine
// refuses or fails keeps nothing awake (warned once per Engine): an
// Engine that will not tell must not keep every labelled container up for
// good.
func (w *Waker) cpuKeepsAwake(ctx context.Context, s standbyJob) bool {
	e := w.engine
	reader, ok := e.actions.(CPUReader)
	if !ok || s.s.Policy.CPU <= 0 {
		return false
	}
	id, after, limit := s.s.ID, s.s.Policy.After, s.s.Policy.CPU
	select {
	case e.cpuReads <- struct{}{}:
	default:
		e.holdForCPU(id, w.now().Add(cpuRecheck(after)), nil)
		return true // read later; awake meanwhile
	}
	defer func() { <-e.cpuReads }()
	rctx, cancel := context.WithTimeout(ctx, cpuReadTimeout)
	defer cancel()
	cur, err := reader.CPU(rctx, id, s.s.Labels)
	if err != nil && w.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// A slow Engine cannot tell now: awake until the next look, not
		// cut on a timeout.
		e.holdForCPU(id, w.now().Add(cpuRecheck(after)), nil)
		return true
	}
	if err != nil {
		if w.ctx.Err() == nil && e.firstCPUFailure() {
			w.logger.Warn("cannot read the CPU of an idle instance labelled caddy.standby_cpu: it goes on standby "+
				"as if it had no such label (said once per Engine)", zap.String("instance", s.s.Name), zap.Error(err))
		}
		return false
	}
	prev := e.swapCPU(id, cur)
	pct, over, ok := CPUPercent(prev, cur, after)
	if !ok || pct <= limit {
		if ok {
			w.logger.Debug("idle instance's CPU is under its caddy.standby_cpu", zap.String("instance", s.s.Name),
				zap.Float64("cpu_percent", pct), zap.Duration("over", over), zap.Float64("standby_cpu", limit))
		}
		e.holdForCPU(id, time.Time{}, nil)
		return false
	}
	until := w.now().Add(cpuRecheck(after))
	e.holdForCPU(id, until, func() {
		w.logger.Info("idle instance kept awake by its CPU (caddy.standby_cpu)", zap.String("instance", s.s.Name),
			zap.Float64("cpu_percent", pct), zap.Duration("over", over), zap.Float64("standby_cpu", limit),
			zap.Duration("idle", w.now().Sub(s.idleSince).Round(time.Millisecond)))
	})
	return true
}

// swapCPU remembers cur as the last reading of id and returns the one
// before it (zero: none).
func (e *Engine) swapCPU(id string, cur CPUSample) CPUSample {
	e.mu.Lock()
	defer e.mu.Unlock()
	sa := e.shared[id]
	if sa == nil {
		return CPUSample{}
	}
	if sa.cpu == nil {
		sa.cpu = &cpuState{}
	}
	prev := sa.cpu.last
	sa.cpu.last = cur
	return prev
}

// holdForCPU keeps id awake until until (zero: no longer); started, if
// not nil, is called when this starts a hold (not while one runs), outside
// the lock.
func (e *Engine) holdForCPU(id string, until time.Time, started func()) {
	e.mu.Lock()
	sa := e.shared[id]
	if sa == nil {
		e.mu.Unlock()
		return
	}
	if sa.cpu == nil {
		sa.cpu = &cpuState{}
	}
	was := !sa.cpu.holding.IsZero()
	sa.cpu.holding = until
	e.mu.Unlock()
	if !was && !until.IsZero() && started != nil {
		started()
	}
}

// firstCPUFailure records that a CPU read failed, and reports whether it
// is the first time on this Engine.
func (e *Engine) firstCPUFailure() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	first := !e.cpuFailed
	e.cpuFailed = true
	return first
}
