// Package readiness checks that instances accept connections before they
// join rotations (R1a): for each catalog.ProbeRequest it tries a TCP
// connection to the instance's dial addresses, at once and then at a
// backing-off pace, until one is accepted or Timeout passes, then tells the
// catalog. It runs beside the daemon adapter, never on a request.
//
// Its cost is bounded whatever the number of instances (R1b): while any
// probe is pending, one scheduling goroutine and at most MaxDials workers,
// each making one attempt (one socket) at a time; attempts are spaced
// (10,000 a second at most, retries 2,000), a first attempt comes before
// any retry, and the youngest probe first.
package readiness

import (
	"container/heap"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Defaults and bounds of a Prober.
const (
	// DefaultTimeout bounds how long an instance is held out of its
	// rotations waiting for its port.
	DefaultTimeout = 5 * time.Second
	// DefaultInterval is the shortest pause between two attempts on one
	// instance: the pace of its first few milliseconds.
	DefaultInterval = time.Millisecond
	// MaxInterval is the longest pause between two attempts on one
	// instance.
	MaxInterval = time.Second
	// The pause after a failed attempt is the time since the probe
	// started divided by backoff (at least the interval, at most
	// MaxInterval), so that a port that opens late is found at most a
	// fifth of its start-up time late; during fastPhase, when most apps
	// bind their port, it is a tenth of that time, at most fastInterval.
	backoff      = 5
	fastBackoff  = 10
	fastPhase    = time.Second
	fastInterval = 5 * time.Millisecond
	// MaxDials bounds the connection attempts in flight, each one socket
	// and one goroutine, whatever the number of instances probed.
	MaxDials = 16
	// maxRetryDials is the share of MaxDials retries may take: the rest
	// stays free for the first attempt on an instance just started, even
	// while many others time out on addresses that drop their SYNs.
	maxRetryDials = 12
	// attemptGap spaces all attempts (10,000 a second at most, after a
	// burst of attemptBurst), retryGap the retries (2,000 a second): a
	// catalog full of instances that never accept costs a bounded share of
	// a CPU (a refused attempt costs about 40 µs), never all of it, so
	// that the events and requests Caddy serves meanwhile are not slowed.
	attemptGap   = 100 * time.Microsecond
	attemptBurst = 64
	retryGap     = 500 * time.Microsecond
	retryBurst   = 16
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
	// dial tries one connection; tests replace it to count sockets.
	dial func(ctx context.Context, addr string) error

	mu      sync.Mutex
	pending map[string]*probe // by instance ID
	// fresh holds the probes whose first attempt has not started; waiting,
	// those waiting for their next attempt, by its time; due, those whose
	// next attempt is due; deadlines, every pending probe not past its
	// timeout, by deadline. fresh and due serve the youngest probe first:
	// an instance just started is the likeliest to accept soon, and one
	// refusing for long has its timeout to fall back on.
	fresh, waiting, due, deadlines queue
	inFlight                       int // attempts running
	attemptPace, retryPace         pace
	seq                            uint64
	unsettled                      int           // probes whose first attempt has not ended
	idle                           chan struct{} // closed while unsettled is 0
	drained                        chan struct{} // closed while no probe is pending and reporting is 0
	reporting                      int           // verdicts taken from pending, not yet given (report)
	scheduling                     bool          // the scheduler goroutine runs
	// work hands attempts to the workers of the current scheduling (nil:
	// none), workers counts them: they start as attempts need them, up
	// to MaxDials, and end with it.
	work    chan *probe
	workers int
	kick    chan struct{} // wakes the scheduler (capacity 1)
	// starts are the learnt times to listen, by image; unlearntPace set
	// probes as if nothing were learnt (SetUnlearntPace).
	starts       startTimes
	unlearntPace atomic.Bool
	wg           sync.WaitGroup
}

// probe is one ProbeRequest being decided. A catalog's first listing
// starts one per instance at once, so it is kept small (160 B, issue 43):
// its deadline is start plus the prober's timeout (deadlineOf).
type probe struct {
	req         catalog.ProbeRequest
	seq         uint64
	start, next time.Time
	// index is the probe's place in fresh, waiting, due and deadlines
	// (-1: not there).
	index    [4]int32
	attempts int32
	// inFlight: an attempt runs; gone: replaced by a newer request, or the
	// prober closed (its attempt's end is ignored); expired: past its
	// deadline while an attempt ran (that attempt's end decides); settled:
	// its first attempt has ended (see Idle).
	inFlight, gone, expired, settled bool
}

// verdict is the answer to one probe, given outside the lock.
type verdict struct {
	probe    *probe
	accepted string // the address that accepted; "": timed out
	after    time.Duration
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
	idle, drained := make(chan struct{}), make(chan struct{})
	close(idle)
	close(drained)
	p := &Prober{
		ctx: ctx, timeout: timeout, interval: interval, ready: ready, log: log,
		pending:   make(map[string]*probe),
		fresh:     queue{slot: 0, less: youngest},
		waiting:   queue{slot: 1, less: func(a, b *probe) bool { return a.next.Before(b.next) }},
		due:       queue{slot: 2, less: youngest},
		deadlines: queue{slot: 3, less: func(a, b *probe) bool { return a.start.Before(b.start) }}, // by deadline: one timeout for all
		idle:      idle,
		drained:   drained,
		kick:      make(chan struct{}, 1),
	}
	p.attemptPace = pace{gap: attemptGap, burst: attemptBurst}
	p.retryPace = pace{gap: retryGap, burst: retryBurst}
	p.dial = p.dialTCP
	return p
}

// Idle returns a channel closed once every pending probe has had its first
// attempt (at once if none is pending). The connection waits on it after
// its first listing, so that a config loaded while instances run serves
// them from the first request; instances that did not accept at once
// (starting, or never listening) are not waited for: they join when their
// port accepts, or after the timeout.
func (p *Prober) Idle() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// Drained returns a channel closed once no probe is pending and the
// verdict of the last one has been given (at once if none is pending):
// every instance probed so far accepted or timed out. The connection
// waits on it after a large first listing to return the burst's memory.
func (p *Prober) Drained() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drained
}

// Probe starts probing r's instance, replacing an earlier probe of it
// (one with the same Gen is already under way: r is dropped). It does not
// block (catalog.Options.Probe).
func (p *Prober) Probe(r catalog.ProbeRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return
	}
	if old := p.pending[r.ID]; old != nil {
		if old.req.Gen == r.Gen {
			return
		}
		p.finish(old)
		p.settle(old)
		old.gone = true
	}
	now := time.Now()
	p.seq++
	pr := &probe{req: r, seq: p.seq, start: now, index: [4]int32{-1, -1, -1, -1}}
	p.pending[r.ID] = pr
	heap.Push(&p.fresh, pr)
	heap.Push(&p.deadlines, pr)
	if p.unsettled == 0 {
		p.idle = make(chan struct{})
	}
	if closed(p.drained) {
		p.drained = make(chan struct{})
	}
	p.unsettled++
	if !p.scheduling {
		p.scheduling = true
		p.work, p.workers = make(chan *probe, MaxDials), 0
		p.wg.Add(1)
		go p.schedule()
	}
	p.nudge()
}

// deadlineOf is when pr times out.
func (p *Prober) deadlineOf(pr *probe) time.Time { return pr.start.Add(p.timeout) }

// Wait returns once every probe has ended (after ctx is done, soon).
func (p *Prober) Wait() { p.wg.Wait() }

// nudge wakes the scheduler if it waits.
func (p *Prober) nudge() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// schedule runs while any probe is pending: it gives the verdicts of
// timeouts and starts attempts, first attempts before retries, within the
// bounds above.
func (p *Prober) schedule() {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		verdicts, wake, more := p.step(time.Now())
		p.reporting += len(verdicts)
		p.mu.Unlock()
		p.report(verdicts)
		if !more {
			return
		}
		var at <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			at = timer.C
		}
		select {
		case <-at:
		case <-p.kick:
		case <-p.ctx.Done():
			p.close()
			return
		}
		timer.Stop()
	}
}

// step does what is due at now and returns the verdicts to give, when to
// look again (zero: at the next nudge) and whether any probe is pending.
// p.mu is held.
func (p *Prober) step(now time.Time) (verdicts []verdict, wake time.Time, more bool) {
	// Timeouts need no socket: never held back by the attempts.
	for d := p.deadlines.peek(); d != nil && !now.Before(p.deadlineOf(d)); d = p.deadlines.peek() {
		heap.Pop(&p.deadlines)
		if d.inFlight {
			d.expired = true // the attempt's end decides
			continue
		}
		p.finish(d)
		verdicts = append(verdicts, verdict{probe: d, after: now.Sub(d.start)})
	}
	for p.inFlight < MaxDials && p.fresh.Len() > 0 {
		if at := p.attemptPace.next; now.Before(at) {
			wake = soonest(wake, at)
			break
		}
		p.attemptPace.take(now)
		p.launch(heap.Pop(&p.fresh).(*probe))
	}
	for w := p.waiting.peek(); w != nil && !now.Before(w.next); w = p.waiting.peek() {
		heap.Push(&p.due, heap.Pop(&p.waiting))
	}
	for p.inFlight < maxRetryDials && p.due.Len() > 0 {
		if at := latest(p.attemptPace.next, p.retryPace.next); now.Before(at) {
			wake = soonest(wake, at)
			break
		}
		p.attemptPace.take(now)
		p.retryPace.take(now)
		p.launch(heap.Pop(&p.due).(*probe))
	}
	if w := p.waiting.peek(); w != nil {
		wake = soonest(wake, w.next)
	}
	if d := p.deadlines.peek(); d != nil {
		wake = soonest(wake, p.deadlineOf(d))
	}
	if len(p.pending) == 0 {
		p.stopScheduling()
		return verdicts, time.Time{}, false
	}
	return verdicts, wake, true
}

// launch hands one attempt on pr to a worker, starting one if all are
// busy. The channel never fills: it holds at most the attempts in flight.
// p.mu is held.
func (p *Prober) launch(pr *probe) {
	pr.inFlight = true
	pr.attempts++
	p.inFlight++
	p.work <- pr
	if p.workers < p.inFlight {
		p.workers++
		p.wg.Add(1)
		go p.worker(p.work)
	}
}

// stopScheduling ends the scheduling: its workers end once they have
// finished the attempts handed to them. p.mu is held, and no probe is
// pending: the map and queues that held them are let go, since a Go map
// keeps the room of the most it ever held (50,000 probes at the start of
// a catalog that size, issue 43), and the next probe starts small ones.
func (p *Prober) stopScheduling() {
	p.scheduling = false
	close(p.work)
	p.work = nil
	if len(p.pending) == 0 {
		p.pending = make(map[string]*probe)
		for _, q := range []*queue{&p.fresh, &p.waiting, &p.due, &p.deadlines} {
			q.items = nil
		}
	}
}

// worker makes the attempts handed to it until the scheduling ends.
func (p *Prober) worker(work <-chan *probe) {
	defer p.wg.Done()
	for pr := range work {
		p.attempt(pr)
	}
}

// attempt tries pr's addresses in turn, one socket at a time, then records
// the outcome: a verdict, or the time of the next attempt.
func (p *Prober) attempt(pr *probe) {
	accepted := ""
	for _, addr := range pr.req.Dials {
		if p.dial(p.ctx, addr) == nil {
			accepted = addr
			break
		}
		if p.ctx.Err() != nil {
			break
		}
	}
	now := time.Now()
	var verdicts []verdict
	p.mu.Lock()
	p.inFlight--
	pr.inFlight = false
	switch {
	case pr.gone:
	case accepted != "":
		p.finish(pr)
		verdicts = append(verdicts, verdict{probe: pr, accepted: accepted, after: now.Sub(pr.start)})
	case pr.expired || !now.Before(p.deadlineOf(pr)):
		p.finish(pr)
		verdicts = append(verdicts, verdict{probe: pr, after: now.Sub(pr.start)})
	default:
		p.settle(pr)
		pr.next = now.Add(p.pauseFor(pr.req.Image, now.Sub(pr.start)))
		heap.Push(&p.waiting, pr)
	}
	p.reporting += len(verdicts)
	p.mu.Unlock()
	p.nudge()
	p.report(verdicts)
}

// pauseFor is the wait before the next attempt of a probe of an instance
// of image started elapsed ago: dense where the image usually starts to
// listen (learned.go), else pause.
func (p *Prober) pauseFor(image string, elapsed time.Duration) time.Duration {
	unlearnt := p.pause(elapsed)
	if p.unlearntPace.Load() {
		return unlearnt
	}
	if learnt, ok := p.starts.learnt(image); ok {
		if d, ok := densePause(learnt, elapsed, unlearnt); ok {
			return d
		}
	}
	return unlearnt
}

// SetUnlearntPace makes the prober probe at the unlearnt pace (on), or
// use what it learnt again (off), learning all the while: a measurement
// takes both in turns in one run.
func (p *Prober) SetUnlearntPace(on bool) { p.unlearntPace.Store(on) }

// Learn records that an instance of image accepted a connection took
// after its probe started (the prober's own verdicts, and the fast path
// of a woken instance's).
func (p *Prober) Learn(image string, took time.Duration) { p.starts.learn(image, took) }

// pause is the wait before the next attempt of a probe started elapsed
// ago, at least the interval: during fastPhase elapsed/fastBackoff, at
// most fastInterval; after it elapsed/backoff, at most MaxInterval.
func (p *Prober) pause(elapsed time.Duration) time.Duration {
	if elapsed < fastPhase {
		return max(min(elapsed/fastBackoff, fastInterval), p.interval)
	}
	return max(min(elapsed/backoff, MaxInterval), p.interval)
}

// finish takes pr out of the prober. p.mu is held.
func (p *Prober) finish(pr *probe) {
	if p.pending[pr.req.ID] == pr {
		delete(p.pending, pr.req.ID)
	}
	p.fresh.remove(pr)
	p.waiting.remove(pr)
	p.due.remove(pr)
	p.deadlines.remove(pr)
}

// settle records that pr's first attempt has ended (or pr has), closing
// idle after the last one. p.mu is held.
func (p *Prober) settle(pr *probe) {
	if pr.settled {
		return
	}
	pr.settled = true
	if p.unsettled--; p.unsettled == 0 {
		close(p.idle)
	}
}

// close drops every pending probe without a verdict: the connection
// closed.
func (p *Prober) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.pending {
		p.finish(pr)
		p.settle(pr)
		pr.gone = true
	}
	p.stopScheduling()
}

// report gives the verdicts, one warning per instance that timed out; none
// once the prober is closed. Each probe settles once its verdict is given,
// so that Idle is closed only after the catalog has applied the verdicts of
// every first attempt.
func (p *Prober) report(verdicts []verdict) {
	if len(verdicts) > 0 {
		defer func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, v := range verdicts {
				p.settle(v.probe)
			}
			// Another goroutine may still be giving verdicts taken
			// before (a worker's, the scheduler's): the last one closes.
			if p.reporting -= len(verdicts); p.reporting == 0 && len(p.pending) == 0 && !closed(p.drained) {
				close(p.drained)
			}
		}()
	}
	for _, v := range verdicts {
		if p.ctx.Err() != nil {
			return
		}
		r := v.probe.req
		if v.accepted != "" {
			p.starts.learn(r.Image, v.after)
			p.log.Debug("instance accepts connections", zap.String("instance", r.Name), zap.String("dial", v.accepted),
				zap.Int("attempts", int(v.probe.attempts)), zap.Duration("after", v.after))
		} else {
			p.log.Warn("instance did not accept a connection in time: it joins its rotations anyway; "+
				"give it a health check, or a longer readiness_timeout, if it starts slowly",
				zap.String("instance", r.Name), zap.Strings("tried", r.Dials), zap.Duration("waited", p.timeout),
				zap.Int("attempts", int(v.probe.attempts)))
		}
		p.ready(r.ID, r.Gen, v.accepted != "")
	}
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// dialTCP is one connection attempt, closed at once if accepted.
func (p *Prober) dialTCP(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: attemptTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// queue is a heap of probes by less, each probe knowing its place in it
// (probe.index[slot]) so that a replaced one is taken out at once.
type queue struct {
	slot  int
	less  func(a, b *probe) bool
	items []*probe
}

func (q *queue) Len() int           { return len(q.items) }
func (q *queue) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }

func (q *queue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index[q.slot] = int32(i)
	q.items[j].index[q.slot] = int32(j)
}

func (q *queue) Push(x any) {
	pr := x.(*probe)
	pr.index[q.slot] = int32(len(q.items))
	q.items = append(q.items, pr)
}

func (q *queue) Pop() any {
	n := len(q.items) - 1
	pr := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	pr.index[q.slot] = -1
	return pr
}

// pace spaces events gap apart, after a burst of burst.
type pace struct {
	next  time.Time // the earliest time of the next event
	gap   time.Duration
	burst int
}

// take records an event at now, due (now is not before next).
func (q *pace) take(now time.Time) {
	if floor := now.Add(-time.Duration(q.burst) * q.gap); q.next.Before(floor) {
		q.next = floor
	}
	q.next = q.next.Add(q.gap)
}

// soonest is the earlier of a and b, the zero time meaning none.
func soonest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// youngest orders probes from the last requested.
func youngest(a, b *probe) bool { return a.seq > b.seq }

// peek is the first probe, nil if none.
func (q *queue) peek() *probe {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// remove takes pr out if it is in.
func (q *queue) remove(pr *probe) {
	if i := pr.index[q.slot]; i >= 0 {
		heap.Remove(q, int(i))
	}
}
