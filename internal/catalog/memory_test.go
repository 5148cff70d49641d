package catalog

import (
	"runtime"
	"strconv"
	"testing"
)

// R5l: what the catalog keeps per wakeable instance, measured on 10,000
// containers on standby, each with its own host, a standby policy and a
// published port (a preview environment each). Logged; the goal is at
// most 2 KB, asserted loosely (the heap figure moves with the runtime).
func TestSleepers_memory_per_instance(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: 10,000 instances and forced collections")
	}
	const n = 10000
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap() // the instances as their adapter makes them are counted: the catalog keeps them
	insts := make([]Instance, n)
	for i := range insts {
		id := strconv.Itoa(i)
		insts[i] = Instance{
			ID: "c" + id, Name: "preview-" + id, State: StateStopped,
			Labels: map[string]string{LabelHost: "pr-" + id + ".preview.example.com", LabelStandbyAfter: "10m",
				"app": "preview-" + id},
			Networks: []Attachment{{Network: "bridge", Gateway: "172.17.0.1"}},
			Ports:    []PublishedPort{{HostPort: uint16(20000 + i%40000), GuestPort: 8080}},
		}
	}
	c := New(Options{})
	c.Replace(insts)
	insts = nil // the catalog's own copies remain: what it keeps
	after := heap()
	per := (float64(after) - float64(before)) / n
	t.Logf("catalog heap per wakeable instance, %d instances: %.0f B (goal: 2 KB)", n, per)
	if per > 8*1024 {
		t.Errorf("%.0f B per instance", per)
	}
	runtime.KeepAlive(c)
}
