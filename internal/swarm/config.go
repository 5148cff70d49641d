package swarm

import (
	"errors"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// Reconciliation bounds (see Config).
const (
	// DefaultConverging is how often a converging service's tasks are
	// re-listed.
	DefaultConverging = 500 * time.Millisecond
	// DefaultResync is how often a settled service's tasks are re-listed.
	DefaultResync = 10 * time.Second
)

// Config is what the adapter needs.
type Config struct {
	// Docker is the Engine connection: a swarm manager's.
	Docker docker.Config
	// Endpoint is EndpointTasks (default) or EndpointVIP.
	Endpoint string
	// Converging and Resync bound how stale a route can be where Swarm
	// sends no event (a task on another node changing state): a service
	// whose tasks are not where Swarm wants them (starting, shutting down,
	// an update or a scale under way) is re-listed every Converging, any
	// other every Resync. Zero: DefaultConverging, DefaultResync.
	Converging, Resync time.Duration
	// NodeProbe is how often the node watch probes the tasks of each node
	// other than the followed manager, to take a node that stops
	// answering out of the rotations within a second, long before Swarm
	// marks it down (R11t). Zero: DefaultNodeProbe (250ms); negative: no
	// node watch. It applies to the endpoint tasks only.
	NodeProbe time.Duration
}

// Check checks the settings without reading files; each error names the
// setting at fault.
func (c Config) Check() error {
	switch c.Endpoint {
	case "", EndpointTasks, EndpointVIP:
	default:
		return setting.Errorf("endpoint", "%q is neither %s nor %s", c.Endpoint, EndpointTasks, EndpointVIP)
	}
	if c.Converging < 0 || c.Resync < 0 {
		return errors.New("reconciliation intervals must not be negative")
	}
	return c.Docker.Check()
}
