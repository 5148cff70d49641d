package readiness

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1b: the prober is drained only once every probe has its verdict, a
// timeout included, not at the first attempts (Idle); the connection
// waits for it to return a large listing's memory.
func TestProbe_R1b_drained_after_the_last_verdict(t *testing.T) {
	ch, ready := recorder()
	p := New(context.Background(), time.Second, time.Millisecond, ready, nil)
	select {
	case <-p.Drained():
	default:
		t.Fatal("a new prober is not drained")
	}
	p.Probe(catalog.ProbeRequest{ID: "id-e", Name: "e", Dials: []string{closedPort(t)}, Gen: 1})
	drained := p.Drained()
	select {
	case <-p.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("not idle after the first attempt")
	}
	select {
	case <-drained:
		t.Fatal("drained before the verdict")
	default:
	}
	if v := await(t, ch); v.accepted {
		t.Fatalf("verdict %+v, want timed out", v)
	}
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("not drained within 10 s of the last verdict")
	}
	p.Probe(catalog.ProbeRequest{ID: "id-f", Name: "f", Dials: []string{closedPort(t)}, Gen: 1})
	select {
	case <-p.Drained():
		t.Fatal("drained while a new probe is pending")
	default:
	}
	await(t, ch)
	p.Wait()
}

// R1b: Drained waits for every verdict to be given, those a worker gives
// (an attempt in flight at the deadline) beside the scheduler's.
func TestProbe_R1b_drained_only_once_every_verdict_is_given(t *testing.T) {
	const n = 300
	var given atomic.Int32
	p := New(context.Background(), 200*time.Millisecond, time.Millisecond, func(string, uint64, bool) {
		time.Sleep(100 * time.Microsecond) // a catalog and a log that take their time
		given.Add(1)
	}, nil)
	p.dial = func(ctx context.Context, _ string) error {
		select { // an address that drops SYNs: attempts are in flight at the deadline
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return errors.New("refused")
	}
	for i := range n {
		p.Probe(catalog.ProbeRequest{ID: fmt.Sprint("id-", i), Name: fmt.Sprint("box-", i), Dials: []string{"192.0.2.1:80"}, Gen: 1})
	}
	select {
	case <-p.Drained():
	case <-time.After(30 * time.Second):
		t.Fatal("not drained within 30 s")
	}
	if got := given.Load(); got != n {
		t.Fatalf("drained with %d verdicts of %d given", got, n)
	}
	p.Wait()
}
