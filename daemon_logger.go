package caddydicer

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// daemonLogger is the logger of a shared daemon connection. The connection
// outlives the config that opened it, so every entry goes to whatever Caddy's
// default logger is at the time, not to the one of an unloaded config.
func daemonLogger(backend string) *zap.Logger {
	return zap.New(currentCore{}).Named(backend)
}

// currentCore hands each entry to the core of Caddy's current default
// logger. Connection logs are rare (one per change of state), so looking the
// core up per entry costs nothing that matters.
type currentCore struct{ fields []zapcore.Field }

func (c currentCore) core() zapcore.Core {
	core := caddy.Log().Core()
	if len(c.fields) > 0 {
		core = core.With(c.fields)
	}
	return core
}

func (c currentCore) Enabled(l zapcore.Level) bool { return caddy.Log().Core().Enabled(l) }

func (c currentCore) With(fields []zapcore.Field) zapcore.Core {
	return currentCore{fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c currentCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return c.core().Check(e, ce)
}

func (c currentCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.core().Write(e, fields)
}

func (c currentCore) Sync() error { return caddy.Log().Core().Sync() }
