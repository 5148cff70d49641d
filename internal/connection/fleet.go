package connection

import (
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// ShareThrough makes storage, the config's, the one the connection shares
// with the other Caddys of a fleet, as self (R5m): scale to zero then
// keeps one idle clock per instance across them. A daemon Caddy does not
// put on standby (Dicer, Swarm) shares nothing. The last config loaded
// wins.
func (c *Conn) ShareThrough(storage fleet.Storage, self fleet.Self) {
	if c.scale.mode != scaleStandby {
		return
	}
	c.fleetOnce.Do(func() { c.fleet = fleet.New(self) })
	c.fleet.SetStorage(storage)
	c.scale.standby.Engine().ShareThrough(c.fleet, c.logger, func(op string) { c.metrics.fleetErrors(op).Inc() })
}
