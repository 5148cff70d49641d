package catalog_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

var benchSizes = []int{10, 1000, 10000}

// benchInstances returns n instances: three (web-a, web-b, web-c) labelled
// app=web and serving shop.example.com, which every benchmarked route
// matches, and n-3 others with labels and hosts of their own.
func benchInstances(n int) []catalog.Instance {
	list := make([]catalog.Instance, 0, n)
	for i, name := range []string{"web-a", "web-b", "web-c"} {
		list = append(list, inst(name, label("app", "web", "tier", "frontend"), host("shop.example.com, www.shop.example.com"),
			addr(fmt.Sprintf("10.0.0.%d", i+1))))
	}
	for i := 3; i < n; i++ {
		list = append(list, inst(fmt.Sprintf("svc-%05d", i),
			label("app", fmt.Sprintf("svc-%d", i%50), "tier", "backend"),
			host(fmt.Sprintf("svc-%05d.example.com", i)),
			addr(fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256))))
	}
	return list
}

// benchCatalog is a catalog holding benchInstances(n), with the app=web
// view and two more watched.
func benchCatalog(n int) (*catalog.Catalog, *catalog.View) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	watch(c, "app=svc-7")
	watch(c, "tier in (edge,frontend),!internal")
	c.Replace(benchInstances(n))
	return c, v
}

func BenchmarkTargets(b *testing.B) {
	for _, kind := range []string{"by_host", "by_selector"} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				c, v := benchCatalog(n)
				route := catalog.Route{Port: 8080}
				if kind == "by_selector" {
					route.View = v
				}
				var dst []catalog.Target
				b.ReportAllocs()
				for b.Loop() {
					dst = c.Snapshot().Targets(dst[:0], route, catalog.NormalizeHost("shop.example.com"))
				}
				if len(dst) != 3 {
					b.Fatalf("got %d targets, want 3", len(dst))
				}
			})
		}
	}
}

// BenchmarkClaimed is the core of the on-demand TLS permission check.
func BenchmarkClaimed(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			c, _ := benchCatalog(n)
			ok := false
			b.ReportAllocs()
			for b.Loop() {
				ok = c.Snapshot().Claimed(catalog.NormalizeHost("www.shop.example.com"))
			}
			if !ok {
				b.Fatal("host not claimed")
			}
		})
	}
}

// BenchmarkPut applies one event: an instance of the app=web view (and of
// the tier view, and of two hosts) flipping between running and paused.
func BenchmarkPut(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			c, _ := benchCatalog(n)
			running := benchInstances(3)[1]
			paused := running
			paused.State = catalog.StatePaused
			events := [2]catalog.Instance{paused, running}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				c.Put(events[i&1])
				i++
			}
		})
	}
}

// BenchmarkReplace is a full re-listing, for reference.
func BenchmarkReplace(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			c, _ := benchCatalog(n)
			list := benchInstances(n)
			b.ReportAllocs()
			for b.Loop() {
				c.Replace(list)
			}
		})
	}
}

// BenchmarkStopping is the catalog's share of leaving on a stop event:
// Stopping takes the instance out, and a start (Started, then the Put of
// the inspection) brings it back, so each loop is one leave and one join.
func BenchmarkStopping(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			c, _ := benchCatalog(n)
			running := benchInstances(3)[1]
			b.ReportAllocs()
			for b.Loop() {
				c.Stopping(running.ID)
				c.Started(running.ID)
				c.Put(running)
			}
		})
	}
}

// BenchmarkPutHostLabel is the update of one instance (its state flips, its
// caddy.host label stays) in a catalog of 1,000 others, by the number of
// names its label lists: 20,000 is over the caps (R2c), and is not parsed.
func BenchmarkPutHostLabel(b *testing.B) {
	for _, n := range []int{1, 100, 20000} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			c, _ := benchCatalog(1000)
			label := host(strings.Join(hostNames(n), ","))
			states := []catalog.State{catalog.StateRunning, catalog.StateStopped}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Put(inst("labelled", label, state(states[i%2])))
				i++
			}
		})
	}
}
