package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dicer"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// TestHeap_never_accepting_catalog is the in-process twin of
// TestScale_never_accepting_catalog: a connection (catalog, readiness
// prober, the Dicer adapter's follow loop) to the test daemon listing N
// never-accepting instances, without Caddy. Once every verdict is in, it
// logs the live heap per instance and, with CADDY_DICER_SCALE_HEAP set,
// writes the heap profile there (heap-inprocess-N.pb.gz):
//
//	CADDY_DICER_P6=1 CADDY_DICER_SCALE_HEAP=/tmp/p6 go test -count=1 -run TestHeap -v ./bench/scale/
//	go tool pprof -top -sample_index=inuse_space /tmp/p6/heap-inprocess-50000.pb.gz
func TestHeap_never_accepting_catalog(t *testing.T) {
	if os.Getenv("CADDY_DICER_P6") == "" {
		t.Skip("a measurement: set CADDY_DICER_P6=1")
	}
	for _, n := range catalogSizes(t) {
		per := heapPerInstance(t, n)
		t.Logf("n=%d: live heap per never-accepting instance, every verdict in: %.0f B", n, per)
	}
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func heapPerInstance(t *testing.T, n int) float64 {
	dir := t.TempDir()
	port := testkit.FreePort(t, "127.77.0.1")
	d := dicertest.New()
	defer d.Close()
	for i := range n {
		d.CreateInstance(&dicerpb.Instance{
			Name: fmt.Sprintf("never-%05d", i), Hostname: fmt.Sprintf("never-%05d", i),
			Labels: map[string]string{"caddy.host": fmt.Sprintf("never-%05d.scale.test", i)},
			Ip:     neverIP(i), State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		})
	}
	sock := filepath.Join(dir, "dicer.sock")
	if err := d.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}
	before := liveHeap() // the daemon's own state is not counted
	a, err := dicer.New(dicer.Config{Address: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connection.New(connection.Spec{
		Kind: "dicer", Address: a.Address(), ReadinessTimeout: 5 * time.Second,
		Run: func(ctx context.Context, sink catalog.Sink) { a.Loop().Run(ctx, sink, nil) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Destruct() }()
	cat := conn.Catalog()
	cat.AddRoutePort(port)
	conn.Await(context.Background(), time.Now().Add(5*time.Minute))
	if keep := os.Getenv("CADDY_DICER_SCALE_HEAP"); keep != "" { // the first attempts made, the verdicts to come
		writeHeap(t, filepath.Join(keep, "heap-inprocess-"+strconv.Itoa(n)+"-probing.pb.gz"))
	}
	deadline := time.Now().Add(5 * time.Minute)
	for cat.Counts().Routable < n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // poll the condition
	}
	if got := cat.Counts().Routable; got < n {
		t.Fatalf("n=%d: %d routable after 5 minutes", n, got)
	}
	after := liveHeap()
	// What the runtime keeps beside the live heap once the free pages are
	// returned, as Caddy does after a large listing (R1b): partly used
	// spans (HeapInuse above HeapAlloc) cannot be returned.
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	t.Logf("n=%d, the whole process with its test daemon, free pages returned: HeapAlloc %d KB, HeapInuse %d KB, HeapIdle-HeapReleased %d KB, StackInuse %d KB, Sys-HeapReleased %d KB",
		n, m.HeapAlloc>>10, m.HeapInuse>>10, (m.HeapIdle-m.HeapReleased)>>10, m.StackInuse>>10, (m.Sys-m.HeapReleased)>>10)
	if keep := os.Getenv("CADDY_DICER_SCALE_HEAP"); keep != "" {
		writeHeap(t, filepath.Join(keep, "heap-inprocess-"+strconv.Itoa(n)+".pb.gz"))
	}
	return (float64(after) - float64(before)) / float64(n)
}

// writeHeap writes the heap profile, after a collection, to path.
func writeHeap(t *testing.T, path string) {
	t.Helper()
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}
