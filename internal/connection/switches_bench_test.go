package connection

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// fileStorage is Caddy's file_system storage with its Stat as the fleet's
// Stater, as the root's fleetStorage gives it.
type fileStorage struct{ *certmagic.FileStorage }

func (s fileStorage) Stat(ctx context.Context, key string) (fleet.KeyInfo, error) {
	info, err := s.FileStorage.Stat(ctx, key)
	return fleet.KeyInfo{Modified: info.Modified, Size: info.Size}, err
}

// benchRecord writes a record of n weights, the first of them on the
// catalog's id-1 with weight w, as another Caddy would.
func benchRecord(b *testing.B, storage fleet.Storage, n, w int) {
	f := fleet.New(fleet.Self{ID: "other"})
	f.SetStorage(storage)
	at := time.Now().UTC()
	if _, err := f.UpdateSwitches(context.Background(), "docker unix:///d.sock", func(sw *fleet.Switches) error {
		sw.Weights = make(map[string]fleet.WeightSwitch, n)
		sw.Weights["id-1"] = fleet.WeightSwitch{Weight: w, Name: "web-1", From: "other", At: at}
		for i := 1; i < n; i++ {
			sw.Weights[fmt.Sprintf("%064x", i)] = fleet.WeightSwitch{Weight: i % 2, Name: fmt.Sprintf("web-old-%d", i), From: "0f8fad5b-d9cb-469f-a165-70867728950e", Host: "caddy-a", At: at}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// R4e: one read of the fleet's switches by one Caddy, on Caddy's
// file_system storage, with a record of 10,000 weights (the issue's
// 100 deploys of 100 containers): unchanged (the read of every second),
// and changed (another Caddy set a weight). Compare with the same
// benchmark on cfa1203, where every read loads and decodes.
func BenchmarkFleet_R4e_read_switches(b *testing.B) {
	for _, changed := range []bool{false, true} {
		name := "unchanged"
		if changed {
			name = "changed"
		}
		b.Run(name, func(b *testing.B) {
			storage := fileStorage{&certmagic.FileStorage{Path: b.TempDir()}}
			benchRecord(b, storage, fleet.MaxWeightSwitches, 0)
			c := fleetConnB(b, storage)
			benchRead(b, c) // the first read: adopted
			for range 3 {   // past the Stat's granularity
				time.Sleep(fleet.StatGranularity / 2)
				benchRead(b, c)
			}
			var cpu time.Duration
			b.ResetTimer()
			for i := range b.N {
				if changed {
					b.StopTimer()
					benchRecord(b, storage, fleet.MaxWeightSwitches, 2+i%2)
					runtime.GC() // the write's garbage is not the read's
					b.StartTimer()
				}
				before := cpuTime()
				benchRead(b, c)
				cpu += cpuTime() - before
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			if want := 2 + (b.N-1)%2; changed && weightOf(c, "id-1") != want {
				b.Fatalf("weight %d, want %d", weightOf(c, "id-1"), want)
			}
		})
	}
}

// fleetConnB is fleetConn whose loop does not run: the benchmark reads.
func fleetConnB(b *testing.B, storage fleet.Storage) *Conn {
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{
		{ID: "id-1", Name: "web-1", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
		{ID: "id-2", Name: "web-2", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
	})
	c := Fixture{Kind: "docker", Address: "unix:///d.sock", Catalog: cat}.Conn()
	b.Cleanup(func() { c.cancel() })
	c.fleet = fleet.New(fleet.Self{ID: "bench"})
	c.fleet.SetStorage(storage)
	c.switches.reader = fleet.NewSwitchesReader(c.daemonKey())
	return c
}

// benchRead reads the fleet's switches once, as the loop does.
func benchRead(b *testing.B, c *Conn) {
	if err := c.readSwitches(context.Background(), c.shared()); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the CPU time the process used so far (user and system): on
// a machine shared with other work, what a read costs, where its wall
// time also counts the waits for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
