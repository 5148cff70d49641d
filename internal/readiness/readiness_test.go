package readiness

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

type outcome struct {
	id       string
	gen      uint64
	accepted bool
	at       time.Time
}

func recorder() (chan outcome, func(string, uint64, bool)) {
	ch := make(chan outcome, 10)
	return ch, func(id string, gen uint64, accepted bool) { ch <- outcome{id, gen, accepted, time.Now()} }
}

// closedPort returns a loopback address on which nothing listens (yet).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func await(t *testing.T, ch chan outcome) outcome {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome within 10s")
		return outcome{}
	}
}

func noVerdict(t *testing.T, ch chan outcome, d time.Duration) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected outcome %+v", v)
	case <-time.After(d):
	}
}

// R1a: the instance is ready once its port accepts, not before.
func TestProbe_ready_once_the_port_accepts(t *testing.T) {
	ch, ready := recorder()
	p := New(context.Background(), 10*time.Second, time.Millisecond, ready, nil)
	addr := closedPort(t)
	p.Probe(catalog.ProbeRequest{ID: "id-a", Name: "a", Dials: []string{closedPort(t), addr}, Gen: 7})
	noVerdict(t, ch, 100*time.Millisecond)
	opened := time.Now()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	v := await(t, ch)
	if v.id != "id-a" || v.gen != 7 || !v.accepted || v.at.Before(opened) {
		t.Fatalf("outcome %+v, want id-a gen 7 accepted after the port opened", v)
	}
	t.Logf("ready %s after the port opened", v.at.Sub(opened))
	p.Wait()
}

// An instance that never accepts joins anyway after the timeout, with one
// warning that names it.
func TestProbe_gives_up_after_the_timeout(t *testing.T) {
	ch, ready := recorder()
	core, logs := observer.New(zapcore.WarnLevel)
	p := New(context.Background(), 150*time.Millisecond, time.Millisecond, ready, zap.New(core))
	start := time.Now()
	p.Probe(catalog.ProbeRequest{ID: "id-b", Name: "b", Dials: []string{closedPort(t)}, Gen: 1})
	v := await(t, ch)
	if v.accepted || v.gen != 1 || v.at.Sub(start) < 150*time.Millisecond {
		t.Fatalf("outcome %+v after %s, want not accepted after the 150ms timeout", v, v.at.Sub(start))
	}
	p.Wait()
	if e := logs.All(); len(e) != 1 || e[0].ContextMap()["instance"] != "b" {
		t.Fatalf("logs %v, want one warning naming b", e)
	}
}

// A newer request for the same instance replaces the older one, whose
// outcome never comes; a closed prober reports nothing.
func TestProbe_newer_request_replaces_older(t *testing.T) {
	ch, ready := recorder()
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, 10*time.Second, time.Millisecond, ready, nil)
	p.Probe(catalog.ProbeRequest{ID: "id-c", Name: "c", Dials: []string{closedPort(t)}, Gen: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p.Probe(catalog.ProbeRequest{ID: "id-c", Name: "c", Dials: []string{ln.Addr().String()}, Gen: 2})
	if v := await(t, ch); v.gen != 2 || !v.accepted {
		t.Fatalf("outcome %+v, want gen 2 accepted", v)
	}
	p.Probe(catalog.ProbeRequest{ID: "id-d", Name: "d", Dials: []string{closedPort(t)}, Gen: 3})
	cancel()
	p.Wait()
	noVerdict(t, ch, 50*time.Millisecond)
}
