package caddydicer

import (
	"context"
	"fmt"
	"os"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"

	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// The handle on the shared connection: a module opens its daemon's
// connection at provision (the pool in package dicerapp shares one per
// key across config reloads), tells its catalog what the route needs,
// awaits it, and releases it by its key at cleanup.

// open resolves daemon's settings and returns its shared connection and
// the connection's key, for dicerapp.Release. The caller tells the catalog
// what its route needs, then calls await.
func open(daemon daemonSettings) (*connection.Conn, string, error) {
	spec, err := resolve(daemon)
	if err != nil {
		return nil, "", err
	}
	c, err := dicerapp.Dial(spec.key, spec.conn())
	if err != nil {
		return nil, "", err
	}
	return c, spec.key, nil
}

// startupWait bounds how long a config load waits for its daemons' first
// listings, so that a daemon which is down never stops Caddy from starting
// (R9). A load waits it at most once, however many of its daemons are down:
// see dicerapp.App.
const startupWait = dicerapp.StartupWait

// await starts following c's daemon if no module did yet, and returns once
// the connection has settled, or once the deadline of the config load ctx
// belongs to has passed (R9, connection.Conn.Await); in a fleet, the first
// await of a connection also reads the fleet's switches, so that the load
// serves its first request with them (R4e).
func await(ctx caddy.Context, c *connection.Conn) error {
	app, err := dicerapp.Of(ctx)
	if err != nil {
		return err
	}
	c.SetEventSink(app.EventSink()) // R13e: this load's events app, from now on
	c.Await(ctx, app.Deadline())
	return nil
}

// fleetSelf names this Caddy among the Caddys that share its storage
// (R5m): its instance ID, which Caddy keeps in its data directory, its
// host name, and this process (fleetProcess): two Caddys that share a
// data directory share an ID, and still see each other's leases.
func fleetSelf() fleet.Self {
	host, _ := os.Hostname()
	id, err := caddy.InstanceID()
	if err != nil {
		return fleet.Self{ID: fmt.Sprintf("%s-%d", host, os.Getpid()), Host: host, Process: fleetProcess}
	}
	return fleet.Self{ID: id.String(), Host: host, Process: fleetProcess}
}

// fleetProcess names this process in the fleet: made once, never
// changed, so that every connection of the process and every config load
// writes its leases as one Caddy.
var fleetProcess = fleet.NewProcess()

// fleetStorage is the config's storage as the fleet uses it (R5m, R4e):
// certmagic's Stat, which says when a key was written without loading it,
// is the fleet's Stater, so that an unchanged switches record is not
// loaded once a second; its Lock and Unlock stay promoted.
func fleetStorage(s certmagic.Storage) fleet.Storage {
	if s == nil {
		return nil
	}
	return statStorage{s}
}

type statStorage struct{ certmagic.Storage }

// Stat implements fleet.Stater.
func (s statStorage) Stat(ctx context.Context, key string) (fleet.KeyInfo, error) {
	info, err := s.Storage.Stat(ctx, key)
	if err != nil {
		return fleet.KeyInfo{}, err
	}
	return fleet.KeyInfo{Modified: info.Modified, Size: info.Size}, nil
}

// Interface guards
var (
	_ fleet.Stater = statStorage{}
	_ fleet.Locker = statStorage{}
)
