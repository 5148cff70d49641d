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

// R1b: a verdict costs the catalog a new snapshot, not a copy of the
// entry and of the paths of the indexes it is in: the verdicts of a first
// listing come all at once (50,000 for a catalog that size), and what they
// allocate, garbage the collector finds live while they come, is what
// Caddy's resident memory keeps (issue 43). Bytes allocated per verdict
// over 10,000 instances with a host each, not a timing.
func TestReadiness_R1b_verdict_allocates_little(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: 10,000 instances")
	}
	const n = 10000
	var probes []ProbeRequest
	c := New(Options{Probe: func(r ProbeRequest) { probes = append(probes, r) }})
	c.AddRoutePort(8080)
	insts := make([]Instance, n)
	for i := range insts {
		id := strconv.Itoa(i)
		insts[i] = Instance{ID: "i" + id, Name: "never-" + id, State: StateRunning,
			Labels:   map[string]string{LabelHost: "never-" + id + ".example.com"},
			Networks: []Attachment{{Network: "default", Address: "10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)}}}
	}
	c.Replace(insts)
	if len(probes) != n {
		t.Fatalf("%d probes, want %d", len(probes), n)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, r := range probes {
		c.MarkReady(r.ID, r.Gen, false)
	}
	runtime.ReadMemStats(&after)
	if got := c.Counts().Routable; got != n {
		t.Fatalf("%d routable, want %d", got, n)
	}
	per := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("%.0f B allocated per verdict", per)
	if per > 1024 {
		t.Errorf("%.0f B allocated per verdict, want at most 1 KiB", per)
	}
}
