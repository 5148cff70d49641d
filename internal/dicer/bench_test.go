package dicer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicer"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// signalSink is a real catalog that says which instance each Put was for.
type signalSink struct {
	*catalog.Catalog
	put chan string
}

func (s signalSink) Put(inst catalog.Instance) {
	s.Catalog.Put(inst)
	s.put <- inst.Name
}

// BenchmarkEventToCatalog is the whole cost of one instance event: the
// test daemon publishes it, the adapter receives it, fetches that one
// instance over gRPC (unix socket) and puts it in the catalog. It should
// not grow with the number of instances the daemon has.
func BenchmarkEventToCatalog(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			dir, err := os.MkdirTemp("", "dcr")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			d := dicertest.New()
			defer d.Close()
			sock := filepath.Join(dir, "d.sock")
			if err := d.ServeUnix(sock); err != nil {
				b.Fatal(err)
			}
			d.EmitQuietly(true)
			for i := range n {
				d.CreateInstance(&dicerpb.Instance{
					Name: fmt.Sprintf("web-%05d", i), Ip: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
					NetworkName: "default", Labels: map[string]string{"app": "web", "caddy.port": "8080"},
					State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
				})
			}
			d.EmitQuietly(false)

			a, err := dicer.New(dicer.Config{Address: "unix:" + sock})
			if err != nil {
				b.Fatal(err)
			}
			sink := signalSink{catalog.New(catalog.Options{}), make(chan string, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				a.Loop().Run(ctx, sink, nil)
			}()
			defer func() { cancel(); <-done }()
			<-sink.Ready()

			states := [2]dicerpb.InstanceState{dicerpb.InstanceState_INSTANCE_STATE_PAUSED, dicerpb.InstanceState_INSTANCE_STATE_RUNNING}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				d.SetState("web-00000", states[i%2], nil)
				if name := <-sink.put; name != "web-00000" {
					b.Fatalf("put %s, want web-00000", name)
				}
			}
		})
	}
}
