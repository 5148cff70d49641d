package caddydicer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// R13a with Caddy's own `tracing` handler: its span_attributes, the
// documented recipe (docs/observing.md), put the instance the request
// went to on the request's span, since the handler replaces them after
// the proxy answered. The span is read back from the request's context
// once it ended.
func TestPlaceholders_R13a_on_the_tracing_span(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none") // spans are recorded, sent nowhere
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	tr := &tracing.Tracing{SpanName: "r13a", SpanAttributes: map[string]string{
		"dicer.instance": "{dicer.upstream.name}",
		"dicer.app":      "{dicer.upstream.label.app}",
	}}
	if err := tr.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Cleanup() }()

	conn := connection.Fixture{Kind: "dicer", Address: "unix:///t.sock", Catalog: benchCatalog(10)}.Conn()
	src := benchSource(conn)
	repl := caddy.NewReplacer()
	w := httptest.NewRecorder()
	r := caddyhttp.PrepareRequest(httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil), repl, w, nil)
	var span trace.Span
	proxy := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { // as reverse_proxy
		span = trace.SpanFromContext(r.Context())
		ups, err := src.GetUpstreams(r)
		if err != nil || len(ups) != 3 {
			t.Fatalf("GetUpstreams: %v, %d upstreams", err, len(ups))
		}
		repl.Set("http.reverse_proxy.upstream.hostport", ups[2].Dial)
		w.WriteHeader(http.StatusOK)
		return nil
	})
	if err := tr.ServeHTTP(w, r, proxy); err != nil {
		t.Fatal(err)
	}
	ro, ok := span.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("the request's span is a %T, not a recorded one", span)
	}
	got := map[string]string{}
	for _, kv := range ro.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if got["dicer.instance"] != "web-c" || got["dicer.app"] != "web" {
		t.Errorf("span attributes %v, want dicer.instance=web-c dicer.app=web", got)
	}
}
