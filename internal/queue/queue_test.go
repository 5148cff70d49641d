package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// until waits for cond, failing t after a deadline.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// enter runs q.Enter in a goroutine and reports its result on the channel.
func enter(q *Queue, ctx context.Context, capacity int) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := q.Enter(ctx, capacity, nil)
		done <- err
	}()
	return done
}

func mustEnter(t *testing.T, q *Queue, capacity int) {
	t.Helper()
	if waited, err := q.Enter(context.Background(), capacity, nil); err != nil || waited != 0 {
		t.Fatalf("Enter under capacity: waited %s, %v", waited, err)
	}
}

func TestQueue_R5q_under_capacity_does_not_wait(t *testing.T) {
	q := New(Options{Size: 1, Timeout: time.Hour})
	mustEnter(t, q, 2)
	mustEnter(t, q, 2)
	if q.InFlight() != 2 || q.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d; want 2, 0", q.InFlight(), q.Waiting())
	}
}

// The waiting requests are let in in the order they came, one per Leave.
func TestQueue_R5q_first_in_first_out(t *testing.T) {
	q := New(Options{Size: 10, Timeout: time.Hour})
	mustEnter(t, q, 1)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Enter(context.Background(), 1, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}()
		until(t, "request queued", func() bool { return q.Waiting() == i+1 })
	}
	for i := range 5 {
		q.Leave()
		until(t, "request let in", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == i+1 })
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("let in in the order %v, want 0 1 2 3 4", order)
		}
	}
}

// Leave hands the slot over itself: once it returns, the first waiting
// request is let in, whatever the timeout (no poll tick).
func TestQueue_R5q_let_in_by_the_release_not_a_tick(t *testing.T) {
	q := New(Options{Size: 1, Timeout: time.Hour})
	mustEnter(t, q, 1)
	done := enter(q, context.Background(), 1)
	until(t, "request queued", func() bool { return q.Waiting() == 1 })
	select {
	case err := <-done:
		t.Fatalf("let in with no slot free: %v", err)
	default:
	}
	q.Leave()
	if q.Waiting() != 0 || q.InFlight() != 1 {
		t.Fatalf("after Leave returned: waiting %d, in flight %d; want 0, 1 (handed over by Leave)", q.Waiting(), q.InFlight())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// At Size waiting, one more is refused at once, and the ones waiting stay.
func TestQueue_R5q_bounded(t *testing.T) {
	q := New(Options{Size: 2, Timeout: time.Hour})
	mustEnter(t, q, 1)
	a, b := enter(q, context.Background(), 1), enter(q, context.Background(), 1)
	until(t, "two queued", func() bool { return q.Waiting() == 2 })
	if _, err := q.Enter(context.Background(), 1, nil); !errors.Is(err, ErrFull) {
		t.Fatalf("third waiting request: %v, want ErrFull", err)
	}
	if q.Waiting() != 2 {
		t.Fatalf("waiting %d after the refusal, want 2", q.Waiting())
	}
	q.Leave()
	q.Leave()
	for _, c := range []<-chan error{a, b} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueue_R5q_timeout(t *testing.T) {
	q := New(Options{Size: 2, Timeout: 20 * time.Millisecond})
	mustEnter(t, q, 1)
	waited, err := q.Enter(context.Background(), 1, nil)
	if !errors.Is(err, ErrTimeout) || waited < 20*time.Millisecond {
		t.Fatalf("waited %s: %v, want ErrTimeout after the timeout", waited, err)
	}
	if q.Waiting() != 0 || q.InFlight() != 1 {
		t.Fatalf("waiting %d, in flight %d after the timeout; want 0, 1", q.Waiting(), q.InFlight())
	}
}

// A client that leaves while queued leaves the queue; one let in as it
// left passes its slot on.
func TestQueue_R5q_client_gone(t *testing.T) {
	q := New(Options{Size: 2, Timeout: time.Hour})
	mustEnter(t, q, 1)
	ctx, cancel := context.WithCancel(context.Background())
	gone := enter(q, ctx, 1)
	until(t, "queued", func() bool { return q.Waiting() == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("client gone: %v", err)
	}
	if q.Waiting() != 0 || q.InFlight() != 1 {
		t.Fatalf("waiting %d, in flight %d; want 0, 1", q.Waiting(), q.InFlight())
	}
	q.Leave()
	mustEnter(t, q, 1)
}

// A larger capacity (an instance joined the route) lets the waiting in,
// from the next request's Enter or SetCapacity; none was let in past it.
func TestQueue_R5q_capacity_grows(t *testing.T) {
	q := New(Options{Size: 5, Timeout: time.Hour})
	mustEnter(t, q, 1)
	a := enter(q, context.Background(), 1)
	until(t, "a queued", func() bool { return q.Waiting() == 1 })
	b := enter(q, context.Background(), 1)
	until(t, "b queued after a", func() bool { return q.Waiting() == 2 })
	q.SetCapacity(2)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	if q.Waiting() != 1 || q.InFlight() != 2 {
		t.Fatalf("waiting %d, in flight %d at capacity 2; want 1, 2", q.Waiting(), q.InFlight())
	}
	c := enter(q, context.Background(), 4) // lets b in, then itself
	if err := <-b; err != nil {
		t.Fatal(err)
	}
	if err := <-c; err != nil {
		t.Fatal(err)
	}
	if q.InFlight() != 4 {
		t.Fatalf("in flight %d, want 4", q.InFlight())
	}
}

// Two routes' queues share nothing: one full does not hold the other.
func TestQueue_R5q_per_route(t *testing.T) {
	busy, other := New(Options{Size: 1, Timeout: time.Hour}), New(Options{Size: 1, Timeout: time.Hour})
	mustEnter(t, busy, 1)
	waiting := enter(busy, context.Background(), 1)
	until(t, "queued", func() bool { return busy.Waiting() == 1 })
	if _, err := busy.Enter(context.Background(), 1, nil); !errors.Is(err, ErrFull) {
		t.Fatalf("busy route: %v, want ErrFull", err)
	}
	mustEnter(t, other, 1)
	if other.Waiting() != 0 || busy.Waiting() != 1 {
		t.Fatal("the other route's request changed the busy route's queue")
	}
	busy.Leave()
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
}

// Under many clients the in-flight count never passes the capacity and
// every request is served or refused, none lost.
func TestQueue_R5q_never_past_capacity(t *testing.T) {
	const capacity, clients = 3, 40
	q := New(Options{Size: clients, Timeout: time.Hour})
	var mu sync.Mutex
	in, peak := 0, 0
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Enter(context.Background(), capacity, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			in++
			peak = max(peak, in)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			in--
			mu.Unlock()
			q.Leave()
		}()
	}
	wg.Wait()
	if peak > capacity || q.InFlight() != 0 || q.Waiting() != 0 {
		t.Fatalf("peak %d (capacity %d), in flight %d, waiting %d", peak, capacity, q.InFlight(), q.Waiting())
	}
}
