package dockertest

import (
	"net/http"
	"regexp"
	"testing"
)

// ReadOnlyProxy is an HTTP proxy to the Engine on a unix socket that
// refuses every write (any method but GET and HEAD) with 403, as a socket
// proxy configured read-only does (tecnativa/docker-socket-proxy with
// POST=0), and counts the writes it refused: a FilterProxy with one rule.
type ReadOnlyProxy struct{ filter *FilterProxy }

// NewReadOnlyProxy starts a read-only proxy to the Engine at EngineHost
// (unix:// only), closed when the test ends.
func NewReadOnlyProxy(t testing.TB) *ReadOnlyProxy {
	t.Helper()
	reads := FilterRule{Methods: []string{http.MethodGet, http.MethodHead}, Path: regexp.MustCompile(`^/`)}
	return &ReadOnlyProxy{filter: NewFilterProxy(t, reads)}
}

// Host is the proxy's endpoint, for Caddy's address setting.
func (p *ReadOnlyProxy) Host() string { return p.filter.Host() }

// Refused is the number of writes refused so far.
func (p *ReadOnlyProxy) Refused() int { return len(p.filter.Refused()) }
