package swarm

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// With the endpoint tasks, the service's own instance is a Group: shown as
// standing for its tasks, not as stopped while they run; with the
// endpoint vip it is an ordinary instance, routed to.
func TestServiceInstanceIsAGroupWithEndpointTasks(t *testing.T) {
	svc := &service{id: "s1", name: "web", labels: map[string]string{"caddy.host": "a.example.com"}}
	running := []catalog.Instance{{ID: "t1", State: catalog.StateRunning}}
	if got := serviceInstance(svc, EndpointTasks, running, nil); !got.Group || got.State != catalog.StateStopped {
		t.Errorf("endpoint tasks: Group %v, State %v; want a group never routed to", got.Group, got.State)
	}
	if got := serviceInstance(svc, EndpointVIP, running, nil); got.Group || got.State != catalog.StateRunning {
		t.Errorf("endpoint vip: Group %v, State %v; want a running instance", got.Group, got.State)
	}
}
