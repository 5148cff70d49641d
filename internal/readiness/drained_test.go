package readiness

import (
	"context"
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
