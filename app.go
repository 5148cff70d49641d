package caddydicer

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(LoadState{})
}

// LoadState is what the plugin's modules of one config load share: when
// their wait for the daemons' first listings ends. It has nothing to
// configure; Caddy creates it, once per config load, when the first
// dicer or docker module asks for it, and drops it with the config.
//
// Modules are provisioned one after the other. Without a deadline shared by
// the load, each daemon that is down would make the load wait its own
// start-up wait, so that `caddy validate` or a start with N daemons down
// would take N times as long.
type LoadState struct {
	deadline time.Time
}

// CaddyModule returns the Caddy module information.
func (LoadState) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "dicer",
		New: func() caddy.Module { return new(LoadState) },
	}
}

// Provision fixes the load's deadline: startupWait from the first module
// that waits for a daemon.
func (s *LoadState) Provision(caddy.Context) error {
	s.deadline = time.Now().Add(startupWait)
	return nil
}

// Start does nothing: the state is read while the load is provisioned.
func (*LoadState) Start() error { return nil }

// Stop does nothing.
func (*LoadState) Stop() error { return nil }

// loadDeadline returns the time until which the modules of ctx's config
// load wait for their connections to settle, the same for all of them.
func loadDeadline(ctx caddy.Context) (time.Time, error) {
	app, err := ctx.App("dicer")
	if err != nil {
		return time.Time{}, fmt.Errorf("dicer: load state: %w", err)
	}
	return app.(*LoadState).deadline, nil
}

// Interface guards.
var (
	_ caddy.App         = (*LoadState)(nil)
	_ caddy.Provisioner = (*LoadState)(nil)
)
