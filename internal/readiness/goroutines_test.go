package readiness

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// crowd is the number of never-accepting instances the R1b tests probe.
const crowd = 10000

// fewGoroutines bounds the goroutines a Prober may add, whatever the number
// of instances: its scheduler, its workers (MaxDials, 16), and a margin
// (timers firing, say).
const fewGoroutines = 40

// sink collects verdicts without ever blocking the prober.
type sink struct {
	mu  sync.Mutex
	got []outcome
	new chan struct{} // a verdict came (capacity 1)
}

func newSink() *sink { return &sink{new: make(chan struct{}, 1)} }

func (s *sink) ready(id string, gen uint64, accepted bool) {
	s.mu.Lock()
	s.got = append(s.got, outcome{id, gen, accepted, time.Now()})
	s.mu.Unlock()
	select {
	case s.new <- struct{}{}:
	default:
	}
}

func (s *sink) all() []outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outcome(nil), s.got...)
}

// awaitID waits for the verdict on id, failing after a minute.
func (s *sink) awaitID(t *testing.T, id string) outcome {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		for _, v := range s.all() {
			if v.id == id {
				return v
			}
		}
		select {
		case <-s.new:
		case <-deadline:
			t.Fatalf("no verdict on %s within a minute", id)
		}
	}
}

// goroutinePeak tracks the goroutines above a base count.
type goroutinePeak struct {
	base, peak int
}

func newGoroutinePeak() *goroutinePeak { return &goroutinePeak{base: runtime.NumGoroutine()} }

func (g *goroutinePeak) sample(t *testing.T) {
	t.Helper()
	if n := runtime.NumGoroutine() - g.base; n > g.peak {
		g.peak = n
		if n > fewGoroutines {
			t.Fatalf("the prober runs %d goroutines for %d instances that never accept, want at most %d", n, crowd, fewGoroutines)
		}
	}
}

// settleGoroutines waits until the goroutines are back to the base count.
func (g *goroutinePeak) settleGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > g.base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after the prober closed", runtime.NumGoroutine()-g.base)
		}
		time.Sleep(time.Millisecond) // poll the condition
	}
}

// R1b, the regression test of issue 18 (8): 10,000 instances whose port
// refuses cost a small constant of goroutines, through their first
// attempts and their retries; none is decided before its timeout. (Before
// R1b: one goroutine per instance.)
func TestProbe_R1b_goroutines_stay_few_whatever_the_instances(t *testing.T) {
	refused := closedPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSink()
	p := New(ctx, time.Minute, time.Millisecond, s.ready, nil)
	g := newGoroutinePeak()
	for i := range crowd {
		p.Probe(catalog.ProbeRequest{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("i-", i), Dials: []string{refused}, Gen: 1})
		g.sample(t)
	}
	idle := p.Idle()
	deadline := time.After(time.Minute)
	for waiting := true; waiting; {
		select {
		case <-idle:
			waiting = false
		case <-deadline:
			t.Fatal("the first attempts took over a minute")
		case <-time.After(time.Millisecond): // sample meanwhile
		}
		g.sample(t)
	}
	for range 200 { // and through retries
		time.Sleep(time.Millisecond)
		g.sample(t)
	}
	if v := s.all(); len(v) != 0 {
		t.Fatalf("%d verdicts before the timeout, first %+v", len(v), v[0])
	}
	cancel()
	p.Wait()
	g.settleGoroutines(t)
	t.Logf("at most %d goroutines for %d instances", g.peak, crowd)
}
