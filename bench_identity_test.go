package caddydicer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// BenchmarkRequestPath is what the plugin adds to one proxied request as
// Caddy's HTTP server hands it over (caddyhttp.PrepareRequest, as the
// server calls it: a replacer with the HTTP placeholders, the request
// variables, a context that ends): GetUpstreams, the selection reverse_proxy records
// in a placeholder, and the end of the request; "placeholders" also
// resolves {dicer.upstream.name} and a label once, as an access-log
// recipe does. The file compiles against the code before R13 too, so the
// two run side by side (docs/benchmarks.md).
func BenchmarkRequestPath(b *testing.B) {
	c := benchCatalog(1000)
	src := benchSource(connection.Fixture{Kind: "dicer", Address: "unix:///bench.sock", Catalog: c}.Conn())
	benchObserved(&src)
	w := benchWriter{http.Header{}}
	for _, use := range []string{"unused", "placeholders"} {
		b.Run(use, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				repl := caddy.NewReplacer()
				ctx, cancel := context.WithCancel(context.Background()) // net/http's request context
				r := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil).WithContext(ctx)
				r = caddyhttp.PrepareRequest(r, repl, w, nil)
				ups, err := src.GetUpstreams(r)
				if err != nil || len(ups) == 0 {
					b.Fatal(err)
				}
				repl.Set("http.reverse_proxy.upstream.hostport", ups[0].Dial)
				if use == "placeholders" {
					_ = repl.ReplaceAll("{dicer.upstream.name} {dicer.upstream.label.app}", "")
				}
				cancel()
			}
		})
	}
}

// benchWriter is a ResponseWriter that writes nowhere.
type benchWriter struct{ h http.Header }

func (w benchWriter) Header() http.Header         { return w.h }
func (w benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w benchWriter) WriteHeader(int)             {}
