package dicerapp

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// R1b: whichever connections ask, the process returns memory to the
// operating system at most once every ReturnMemoryEvery.
func TestReadiness_R1b_memory_returned_at_most_once_per_ReturnMemoryEvery(t *testing.T) {
	p := &pool{UsagePool: caddy.NewUsagePool()}
	if !p.returnMemory() {
		t.Fatal("the first return was refused")
	}
	if p.returnMemory() {
		t.Fatal("a second return at once was made")
	}
	p.returned = time.Now().Add(-ReturnMemoryEvery + time.Minute)
	if p.returnMemory() {
		t.Fatalf("a return %s after the last was made", ReturnMemoryEvery-time.Minute)
	}
	p.returned = time.Now().Add(-ReturnMemoryEvery)
	if !p.returnMemory() {
		t.Fatalf("a return %s after the last was refused", ReturnMemoryEvery)
	}
}
