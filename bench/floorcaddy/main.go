// Command floorcaddy is Caddy with its standard modules and one upstream
// source of its own, `dynamic fixed <address>...`, which hands out fresh
// copies of fixed upstreams on every request, as Caddy's own dynamic
// sources do (`dynamic a` copies its cached list). It is the floor of
// what any dynamic upstream source costs in Caddy: the GetUpstreams call,
// the per-request upstreams and Caddy's provisioning of each of them.
// bench/cpu.sh runs it beside our Caddy to tell Caddy's share of a
// dynamic route's cost from ours (docs/benchmarks.md). Not a plugin: it is
// built with go build, for benchmarks only.
package main

import (
	"net/http"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() { caddy.RegisterModule(Fixed{}) }

func main() { caddycmd.Main() }

// Fixed is the upstream source `dynamic fixed <address>...`.
type Fixed struct {
	// Dials are the upstreams' addresses, host:port.
	Dials []string `json:"dials,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Fixed) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.fixed",
		New: func() caddy.Module { return new(Fixed) },
	}
}

// GetUpstreams returns fresh upstreams for the fixed addresses.
func (f *Fixed) GetUpstreams(*http.Request) ([]*reverseproxy.Upstream, error) {
	block := make([]reverseproxy.Upstream, len(f.Dials))
	ups := make([]*reverseproxy.Upstream, len(f.Dials))
	for i, d := range f.Dials {
		block[i].Dial = d
		ups[i] = &block[i]
	}
	return ups, nil
}

// UnmarshalCaddyfile reads `dynamic fixed <address>...`.
func (f *Fixed) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	f.Dials = d.RemainingArgs()
	if len(f.Dials) == 0 {
		return d.ArgErr()
	}
	return nil
}

// Interface guards
var (
	_ reverseproxy.UpstreamSource = (*Fixed)(nil)
	_ caddyfile.Unmarshaler       = (*Fixed)(nil)
)
