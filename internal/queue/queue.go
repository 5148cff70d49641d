// Package queue is a route's admission at capacity (R5q): at most a
// capacity of requests in flight, the others waiting first in, first
// out, in a queue of bounded length, each for a bounded time, and let in
// the moment a request in flight ends (no poll tick). It imports no
// Caddy: the upstream source gives it the route's capacity on every
// request and calls Leave when a request it let in ends.
package queue

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrFull is Enter's error when the queue already holds Size requests.
var ErrFull = errors.New("the route's queue is full")

// ErrTimeout is Enter's error when a request waited Timeout without a
// free slot.
var ErrTimeout = errors.New("no slot freed within the route's queue_timeout")

// Options are a queue's bounds.
type Options struct {
	// Size is how many requests may wait at once; one more is refused
	// with ErrFull. At least 1.
	Size int
	// Timeout is how long a request waits at most.
	Timeout time.Duration
	// Depth, if set, is told each change of the number of requests
	// waiting (+1 for one more), under the queue's lock: a gauge's Add,
	// so that queues sharing a series sum up.
	Depth func(delta int)
}

// Queue admits requests under a capacity. The zero value is not usable:
// use New.
type Queue struct {
	opts Options

	mu       sync.Mutex
	inFlight int
	capacity int       // 0: no limit
	waiting  list.List // of *waiter, first in first
	// queued mirrors waiting.Len(), read without the lock.
	queued atomic.Int32
}

// waiter is a request waiting for a slot: about 100 bytes with its list
// element, plus a timer.
type waiter struct {
	ready    chan struct{} // closed once admitted
	admitted bool          // under Queue.mu
}

// New returns an empty queue with these bounds.
func New(opts Options) *Queue {
	opts.Size = max(opts.Size, 1)
	return &Queue{opts: opts}
}

// Enter lets the caller in when fewer than capacity requests it let in
// are in flight and none waits before it, else waits first in, first
// out, until a slot is handed to it (by Leave, or by a later Enter that
// brings a larger capacity), Timeout passes (ErrTimeout), or ctx ends
// (its error). A full queue is refused at once (ErrFull). capacity is
// the route's as the caller sees it now, kept until the next Enter or
// SetCapacity; 0 is no limit. queued, if set, is called once the request
// joins the queue, before it waits (outside the lock). On a nil error the
// caller owns a slot and must call Leave once; waited is how long it
// queued (0: not at all).
func (q *Queue) Enter(ctx context.Context, capacity int, queued func()) (waited time.Duration, err error) {
	q.mu.Lock()
	q.capacity = max(capacity, 0)
	q.admitLocked() // the capacity may have grown
	if q.waiting.Len() == 0 && q.roomLocked() {
		q.inFlight++
		q.mu.Unlock()
		return 0, nil
	}
	if q.waiting.Len() >= q.opts.Size {
		q.mu.Unlock()
		return 0, ErrFull
	}
	w := &waiter{ready: make(chan struct{})}
	e := q.waiting.PushBack(w)
	q.depthLocked()
	q.mu.Unlock()
	if queued != nil {
		queued()
	}

	start := time.Now()
	timer := time.NewTimer(q.opts.Timeout)
	defer timer.Stop()
	select {
	case <-w.ready:
		return time.Since(start), nil
	case <-timer.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	waited = time.Since(start)
	switch {
	case !w.admitted:
		q.waiting.Remove(e)
		q.depthLocked()
		return waited, err
	case errors.Is(err, ErrTimeout):
		return waited, nil // let in as the time ran out: served
	default: // let in as the client left: the slot goes on
		q.inFlight--
		q.admitLocked()
		return waited, err
	}
}

// Leave ends a request Enter let in: its slot goes to the first waiting
// request, if the capacity allows, at once.
func (q *Queue) Leave() {
	q.mu.Lock()
	q.inFlight--
	q.admitLocked()
	q.mu.Unlock()
}

// SetCapacity changes the capacity (0: no limit) and lets in the waiting
// requests it makes room for. It takes the lock only when requests wait.
func (q *Queue) SetCapacity(capacity int) {
	if q.queued.Load() == 0 {
		return
	}
	q.mu.Lock()
	q.capacity = max(capacity, 0)
	q.admitLocked()
	q.mu.Unlock()
}

// Waiting is how many requests wait now.
func (q *Queue) Waiting() int { return int(q.queued.Load()) }

// InFlight is how many requests Enter let in are in flight now.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inFlight
}

func (q *Queue) roomLocked() bool { return q.capacity == 0 || q.inFlight < q.capacity }

// admitLocked lets waiting requests in, first first, while there is room.
func (q *Queue) admitLocked() {
	if q.waiting.Len() == 0 {
		return
	}
	for q.waiting.Len() > 0 && q.roomLocked() {
		w := q.waiting.Remove(q.waiting.Front()).(*waiter)
		w.admitted = true
		q.inFlight++
		close(w.ready)
	}
	q.depthLocked()
}

func (q *Queue) depthLocked() {
	n := int32(q.waiting.Len())
	old := q.queued.Swap(n)
	if q.opts.Depth != nil && n != old {
		q.opts.Depth(int(n - old))
	}
}
