// Package dicerapp is the `dicer` Caddy app: what the plugin's modules of
// one config load share. It has nothing to configure; Caddy creates it,
// once per config load, when the first module of this plugin asks for it
// (Of), and drops it with the config.
package dicerapp

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"

	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
)

func init() {
	caddy.RegisterModule(new(App))
}

// StartupWait bounds how long a config load waits for its daemons' first
// listings, from the first module that waits for one: the same deadline
// for every module of the load.
const StartupWait = 3 * time.Second

// App is what the plugin's modules of one config load share: when their
// wait for the daemons' first listings ends (Deadline), and what they
// build together (Shared: the groups the sources of a `dynamic multi`
// form).
//
// Modules are provisioned one after the other. Without a deadline shared by
// the load, each daemon that is down would make the load wait its own
// start-up wait, so that `caddy validate` or a start with N daemons down
// would take N times as long.
type App struct {
	deadline time.Time

	mu     sync.Mutex
	shared map[any]any

	// events is where the load's connections send their lifecycle
	// events (R13e): Caddy's events app, looked up once per load.
	events lifecycle.Sink
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "dicer",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision fixes the load's deadline: StartupWait from now, the first
// module that asks for the app; and looks up Caddy's events app, where the
// connections' lifecycle events go (R13e, docs/events.md).
func (a *App) Provision(ctx caddy.Context) error {
	a.deadline = time.Now().Add(StartupWait)
	a.shared = make(map[any]any)
	v, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("dicer: the events app: %w", err)
	}
	if ev, ok := v.(*caddyevents.App); ok {
		sink := eventSink{ctx: ctx, app: ev, live: new(atomic.Bool)}
		// The events app binds its handlers when it starts, which may be
		// after this app starts: nothing is emitted before Caddy's own
		// "started" event says every app of the load runs.
		if err := ev.On("started", sink); err != nil {
			return fmt.Errorf("dicer: the events app: %w", err)
		}
		a.events = sink
	}
	return nil
}

// EventSink is Caddy's events app of this load, as the connections'
// lifecycle events reach it (R13e): from the `dicer` app, the events'
// origin; nil if there is none.
func (a *App) EventSink() lifecycle.Sink { return a.events }

// eventSink emits on Caddy's events app with the context of the load's
// dicer app: once the load is unloaded, its context is done and nothing
// is emitted (the next load's sink takes over).
type eventSink struct {
	ctx  caddy.Context
	app  *caddyevents.App
	live *atomic.Bool // the load has started (Handle)
}

// Listens implements lifecycle.Sink.
func (s eventSink) Listens(name string) bool {
	return s.live.Load() && s.ctx.Err() == nil && s.app.ShouldEmit(name)
}

// Handle implements caddyevents.Handler: Caddy's "started" event, after
// which the events app's handlers are bound and may be read.
func (s eventSink) Handle(context.Context, caddy.Event) error {
	s.live.Store(true)
	return nil
}

// Emit implements lifecycle.Sink.
func (s eventSink) Emit(name string, data map[string]any) {
	if s.ctx.Err() == nil {
		s.app.Emit(s.ctx, name, data)
	}
}

// Deadline is the time until which the modules of the load wait for their
// connections to settle, the same for all of them.
func (a *App) Deadline() time.Time { return a.deadline }

// Shared returns the value kept for key in this load, made by newValue at
// the first call for it.
func (a *App) Shared(key any, newValue func() any) any {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.shared[key]
	if !ok {
		v = newValue()
		a.shared[key] = v
	}
	return v
}

// Start does nothing: the state is read while the load is provisioned.
func (*App) Start() error { return nil }

// Stop does nothing.
func (*App) Stop() error { return nil }

// Of returns the App of ctx's config load.
func Of(ctx caddy.Context) (*App, error) {
	app, err := ctx.App("dicer")
	if err != nil {
		return nil, fmt.Errorf("dicer: load state: %w", err)
	}
	return app.(*App), nil
}

// Interface guards.
var (
	_ caddy.App           = (*App)(nil)
	_ caddy.Provisioner   = (*App)(nil)
	_ lifecycle.Sink      = eventSink{}
	_ caddyevents.Handler = eventSink{}
)
