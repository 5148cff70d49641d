package pathprefix

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// fixedSource is a source whose prefix is always the same.
type fixedSource string

func (f fixedSource) PathPrefix(*http.Request) string { return string(f) }

// R2d: the handler gives {dicer.path_prefix} from its source, worked out
// when read, and calls the next handler.
func TestPathPrefix_R2d_placeholder(t *testing.T) {
	h := &PathPrefix{source: fixedSource("/admin")}
	r := httptest.NewRequest(http.MethodGet, "/admin/x", nil)
	repl := caddy.NewReplacer()
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	called := false
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { called = true; return nil })
	if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil || !called {
		t.Fatalf("ServeHTTP: %v, next called %v", err, called)
	}
	if got := repl.ReplaceAll("{dicer.path_prefix}", "-"); got != "/admin" {
		t.Errorf("{dicer.path_prefix} = %q, want /admin", got)
	}
}

// Without a source, Provision names the setting; the Caddyfile wants the
// source's name.
func TestPathPrefix_settings(t *testing.T) {
	err := new(PathPrefix).Provision(caddy.Context{})
	var se *setting.Error
	if !errors.As(err, &se) || se.Setting != "source" {
		t.Errorf("Provision without a source: %v, want a setting error naming source", err)
	}
	_, err = parsePathPrefix(httpcaddyfile.Helper{Dispenser: caddyfile.NewTestDispenser("dicer_path_prefix")})
	if err == nil || !strings.Contains(err.Error(), "argument") {
		t.Errorf("no source named: %v, want an argument error", err)
	}
}
