package connection

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// benchRead reads the fleet's switches once, as the loop does.
func benchRead(b *testing.B, c *Conn) {
	if err := c.readSwitches(context.Background(), c.shared(), time.Now()); err != nil {
		b.Fatal(err)
	}
}

// fleetConnB is fleetConn without its loop.
func fleetConnB(b *testing.B, storage fleet.Storage) *Conn {
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{
		{ID: "id-1", Name: "web-1", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
		{ID: "id-2", Name: "web-2", State: catalog.StateRunning, Labels: map[string]string{"app": "web"}},
	})
	c := Fixture{Kind: "docker", Address: "unix:///d.sock", Catalog: cat}.Conn()
	b.Cleanup(func() { c.cancel() })
	c.fleet = fleet.New(fleet.Self{ID: "bench"})
	c.fleet.SetStorage(storage)
	c.switches.reader = fleet.NewSwitchesReader(c.daemonKey())
	return c
}
