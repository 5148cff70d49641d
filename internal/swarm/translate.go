package swarm

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// The translation of a Swarm service and its tasks:
//
//   - Each service is one instance (ID the service's, Name the service's
//     name, Labels the service's labels, Compose's deploy.labels). With
//     the endpoint "tasks" it is never routed to (StateStopped): it is
//     there so that the permission allows its hosts even while no task
//     runs (R7: whatever state). With the endpoint "vip" it is the one
//     routed to: running while one of its tasks is routable, at its
//     virtual IP on each of its networks.
//   - With the endpoint "tasks", each task whose desired state is running
//     and that has not ended is an instance: Name
//     <service>.<slot>.<task ID> (a global service's: <service>.<node
//     ID>.<task ID>), as Docker names the task's container; Labels the
//     service's; Networks its addresses on the service's networks, the
//     ingress network left out (Caddy cannot join it). A task being shut
//     down (desired state shutdown) is no instance: it leaves at once.
//   - A task's state and health: on the local node, its container's (the
//     Engine's container events keep them current to the millisecond);
//     elsewhere, the task's state, with no health verdict (Swarm reports a
//     task running only once its health check, if any, has passed, and
//     fails it when the check fails).
//   - Ports are none: a task is reached at its own address on the port
//     its caddy.port label or the route names. (A port the service
//     publishes goes through Swarm's routing mesh, to any task.)

// Endpoints: where requests go.
const (
	// EndpointTasks routes to each task at its own address (the default).
	EndpointTasks = "tasks"
	// EndpointVIP routes to the service's virtual IP, which Swarm balances
	// over its tasks.
	EndpointVIP = "vip"
)

// Labels Swarm puts on a task's container.
const (
	labelServiceID = "com.docker.swarm.service.id"
	labelTaskID    = "com.docker.swarm.task.id"
)

// service is what the adapter keeps of one service.
type service struct {
	id, name string
	labels   map[string]string
	// vips are the service's virtual IPs by network ID (no prefix length).
	vips map[string]string
	// replicas is the replicated service's task count; -1 for a global
	// service.
	replicas int
	// updating says a rolling update (or its rollback) is under way.
	updating bool
}

// fromService keeps what the adapter needs of a service.
func fromService(s swarm.Service) *service {
	sv := &service{id: s.ID, name: s.Spec.Name, labels: cloneLabels(s.Spec.Labels), replicas: -1}
	if r := s.Spec.Mode.Replicated; r != nil && r.Replicas != nil {
		sv.replicas = int(*r.Replicas)
	}
	if u := s.UpdateStatus; u != nil {
		switch u.State {
		case swarm.UpdateStateUpdating, swarm.UpdateStateRollbackStarted:
			sv.updating = true
		}
	}
	for _, v := range s.Endpoint.VirtualIPs {
		if addr := stripPrefix(v.Addr); addr != "" {
			if sv.vips == nil {
				sv.vips = map[string]string{}
			}
			sv.vips[v.NetworkID] = addr
		}
	}
	return sv
}

// service keeps what the session needs of a service: its labels read
// under the connection's label sets (R2f: caddy-docker-proxy's and
// Traefik's deploy.labels translated or refused), for it and each of its
// tasks.
func (c *conn) service(s swarm.Service) *service {
	sv := fromService(s)
	sv.labels = foreignlabels.Apply(c.labels, sv.labels)
	return sv
}

// containerOf is the ID of t's container as Swarm records it; "" before
// it has one.
func containerOf(t swarm.Task) string {
	if t.Status.ContainerStatus == nil {
		return ""
	}
	return t.Status.ContainerStatus.ContainerID
}

// local is the state and health of a task's container on this node.
type local struct {
	state  catalog.State
	health catalog.Health
}

// taskState maps Swarm's task states.
func taskState(s swarm.TaskState) catalog.State {
	switch s {
	case swarm.TaskStateNew, swarm.TaskStateAllocated, swarm.TaskStatePending, swarm.TaskStateAssigned,
		swarm.TaskStateAccepted, swarm.TaskStatePreparing, swarm.TaskStateReady, swarm.TaskStateStarting:
		return catalog.StateStarting
	case swarm.TaskStateRunning:
		return catalog.StateRunning
	case swarm.TaskStateComplete, swarm.TaskStateShutdown:
		return catalog.StateStopped
	case swarm.TaskStateFailed, swarm.TaskStateRejected, swarm.TaskStateOrphaned, swarm.TaskStateRemove:
		return catalog.StateFailed
	}
	return catalog.StateUnknown
}

// ended says whether a task has ended: no state follows these.
func ended(s swarm.TaskState) bool {
	switch taskState(s) {
	case catalog.StateStopped, catalog.StateFailed:
		return true
	}
	return false
}

// wanted says whether Swarm wants the task to run: it is an instance
// only then.
func wanted(t swarm.Task) bool {
	return t.DesiredState == swarm.TaskStateRunning && !ended(t.Status.State)
}

// settled says whether a task is where Swarm wants it: running, or ended
// and not wanted. A service with an unsettled task is converging.
func settled(t swarm.Task) bool {
	if t.DesiredState == swarm.TaskStateRunning {
		return t.Status.State == swarm.TaskStateRunning
	}
	return ended(t.Status.State)
}

// taskName is the name Docker gives the task's container.
func taskName(svc *service, t swarm.Task) string {
	return taskPlace(svc, t) + "." + t.ID
}

// taskPlace is the task's service and slot (a global service's: its
// node), which the task that replaces it in a rolling update or after a
// failure takes over: its identity for sticky sessions (R4d).
func taskPlace(svc *service, t swarm.Task) string {
	slot := t.NodeID
	if t.Slot != 0 {
		slot = strconv.Itoa(t.Slot)
	}
	return svc.name + "." + slot
}

// fromTask translates a task of svc; ok is false when it is no instance
// (not wanted, or ended). c is its container's state on this node, if
// known.
func fromTask(svc *service, t swarm.Task, c *local) (inst catalog.Instance, ok bool) {
	if !wanted(t) {
		return catalog.Instance{}, false
	}
	inst = catalog.Instance{
		ID:       t.ID,
		Name:     taskName(svc, t),
		Identity: taskPlace(svc, t),
		Labels:   svc.labels,
		State:    taskState(t.Status.State),
		Networks: taskNetworks(t.NetworksAttachments),
	}
	if cs := t.Spec.ContainerSpec; cs != nil {
		inst.Image = cs.Image // the task's image spec: its version in a rollout (R4f)
	}
	if c != nil {
		inst.State, inst.Health = c.state, c.health
	}
	return inst, true
}

// taskNetworks lists a task's addresses, ingress left out, in
// network-name order.
func taskNetworks(atts []swarm.NetworkAttachment) []catalog.Attachment {
	var out []catalog.Attachment
	for _, a := range atts {
		if a.Network.Spec.Ingress {
			continue
		}
		att := catalog.Attachment{Network: a.Network.Spec.Name}
		if len(a.Addresses) > 0 {
			att.Address = stripPrefix(a.Addresses[0])
		}
		out = append(out, att)
	}
	slices.SortFunc(out, func(a, b catalog.Attachment) int { return strings.Compare(a.Network, b.Network) })
	return out
}

// serviceInstance translates the service itself: with the endpoint
// "vip", running while one of its tasks is (running and, where it has a
// verdict, healthy), reached at its virtual IPs (names: the network ID to
// name map of its tasks' attachments); else never routed to.
func serviceInstance(svc *service, endpoint string, tasks []catalog.Instance, netNames map[string]string) catalog.Instance {
	inst := catalog.Instance{ID: svc.id, Name: svc.name, Labels: svc.labels, State: catalog.StateStopped}
	if endpoint != EndpointVIP {
		inst.Group = true // shown as such, not as stopped
		return inst
	}
	for _, t := range tasks {
		if t.State == catalog.StateRunning && (t.Health == catalog.HealthNone || t.Health == catalog.HealthHealthy) {
			inst.State = catalog.StateRunning
			break
		}
	}
	for id, addr := range svc.vips {
		name, ok := netNames[id]
		if !ok {
			continue // the ingress network, or one no task is on
		}
		inst.Networks = append(inst.Networks, catalog.Attachment{Network: name, Address: addr})
	}
	slices.SortFunc(inst.Networks, func(a, b catalog.Attachment) int { return strings.Compare(a.Network, b.Network) })
	return inst
}

// networkNames maps the network IDs of tasks' attachments to their names,
// ingress left out.
func networkNames(tasks []swarm.Task) map[string]string {
	names := map[string]string{}
	for _, t := range tasks {
		for _, a := range t.NetworksAttachments {
			if !a.Network.Spec.Ingress {
				names[a.Network.ID] = a.Network.Spec.Name
			}
		}
	}
	return names
}

// stripPrefix turns "10.0.1.5/24" into "10.0.1.5"; "" if it is no
// address.
func stripPrefix(cidr string) string {
	if p, err := netip.ParsePrefix(cidr); err == nil {
		return p.Addr().String()
	}
	if a, err := netip.ParseAddr(cidr); err == nil {
		return a.String()
	}
	return ""
}

func cloneLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	return maps.Clone(l)
}

// translateService translates a service and its tasks (every task Swarm
// lists for it, ended ones included) into the instances they make, and
// says whether the service is converging: a task not where Swarm wants
// it, an update under way, or fewer or more tasks wanted than replicas.
// containers are the states of task containers on this node, by container
// ID (localContainers).
func translateService(svc *service, tasks []swarm.Task, containers map[string]local, endpoint string) (out []catalog.Instance, converging bool) {
	converging = svc.updating
	var running []catalog.Instance
	want := 0
	for _, t := range tasks {
		if !settled(t) {
			converging = true
		}
		var c *local
		if l, ok := containers[containerOf(t)]; ok {
			c = &l
		}
		inst, ok := fromTask(svc, t, c)
		if !ok {
			continue
		}
		want++
		running = append(running, inst)
	}
	if svc.replicas >= 0 && want != svc.replicas {
		converging = true
	}
	out = append(out, serviceInstance(svc, endpoint, running, networkNames(tasks)))
	if endpoint != EndpointVIP {
		out = append(out, running...)
	}
	return out, converging
}
