package caddydicer

import (
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(new(App))
}

// App is what the plugin's modules of one config load share: when
// their wait for the daemons' first listings ends, and the groups our
// sources form in each `dynamic multi` (see upstreams_multi.go). It has
// nothing to configure; Caddy creates it, once per config load, when the
// first module of this plugin (any backend's) asks for it, and drops it
// with the config.
//
// Modules are provisioned one after the other. Without a deadline shared by
// the load, each daemon that is down would make the load wait its own
// start-up wait, so that `caddy validate` or a start with N daemons down
// would take N times as long.
type App struct {
	deadline time.Time

	mu     sync.Mutex
	groups map[*reverseproxy.MultiUpstreams]*sourceGroup
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "dicer",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision fixes the load's deadline: startupWait from the first module
// that waits for a daemon.
func (s *App) Provision(caddy.Context) error {
	s.deadline = time.Now().Add(startupWait)
	s.groups = make(map[*reverseproxy.MultiUpstreams]*sourceGroup)
	return nil
}

// group returns the group of the sources multi holds, made at the first
// call.
func (s *App) group(multi *reverseproxy.MultiUpstreams) *sourceGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[multi]
	if g == nil {
		g = new(sourceGroup)
		s.groups[multi] = g
	}
	return g
}

// Start does nothing: the state is read while the load is provisioned.
func (*App) Start() error { return nil }

// Stop does nothing.
func (*App) Stop() error { return nil }

// loadDeadline returns the time until which the modules of ctx's config
// load wait for their connections to settle, the same for all of them.
func loadDeadline(ctx caddy.Context) (time.Time, error) {
	state, err := loadState(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return state.deadline, nil
}

// loadState returns the App of ctx's config load.
func loadState(ctx caddy.Context) (*App, error) {
	app, err := ctx.App("dicer")
	if err != nil {
		return nil, fmt.Errorf("dicer: load state: %w", err)
	}
	return app.(*App), nil
}

// Interface guards.
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
)
