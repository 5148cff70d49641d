package swarm

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/swarm"
	"github.com/docker/docker/api/types/system"

	"github.com/caddy-dicer/caddy-dicer/internal/docker"
)

// fakeSwarm is a swarm manager in memory: the test sets its services,
// tasks and local containers and sends events; it counts the calls.
type fakeSwarm struct {
	mu         sync.Mutex
	services   map[string]swarm.Service
	tasks      map[string]swarm.Task
	containers map[string]container.Summary // by task ID
	calls      map[string]int
	events     chan events.Message
	// silent are the addresses the node watch's probes get no answer
	// from; every other is refused (no test dials out).
	silent map[string]bool
	// beforeUpdate, if set, runs at each ServiceUpdate before the
	// version is checked, f.mu held: another writer's update.
	beforeUpdate func()
	// updateErr, if set, is every ServiceUpdate's answer (a socket proxy
	// that refuses the write).
	updateErr error
}

// dial is the node watch's dialer: no connection is made; an address in
// silent times out, any other is refused.
func (f *fakeSwarm) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	f.mu.Lock()
	silent := f.silent[addr]
	f.calls["dial "+addr]++
	f.mu.Unlock()
	if silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

func newFakeSwarm() *fakeSwarm {
	return &fakeSwarm{
		services: map[string]swarm.Service{}, tasks: map[string]swarm.Task{},
		containers: map[string]container.Summary{}, calls: map[string]int{}, silent: map[string]bool{},
		events: make(chan events.Message, 1000),
	}
}

// adapter returns an adapter whose sessions talk to f.
func (f *fakeSwarm) adapter(cfg Config) *Adapter {
	cfg.Docker = docker.Config{Host: "unix:///nonexistent/docker.sock"}
	a, err := New(cfg)
	if err != nil {
		panic(err)
	}
	a.wrap = func(engine) engine { return f }
	a.dial = f.dial
	return a
}

func (f *fakeSwarm) count(call string) {
	f.mu.Lock()
	f.calls[call]++
	f.mu.Unlock()
}

// Calls returns how many times call was made.
func (f *fakeSwarm) Calls(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

func (f *fakeSwarm) update(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// Events ends, as the Engine client's does, with the context's error.
func (f *fakeSwarm) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	errs := make(chan error, 1)
	context.AfterFunc(ctx, func() { errs <- ctx.Err() })
	return f.events, errs
}

func (f *fakeSwarm) Info(context.Context) (system.Info, error) {
	f.count("Info")
	return system.Info{Swarm: swarm.Info{NodeID: "local"}}, nil
}

func (f *fakeSwarm) ServiceList(context.Context, swarm.ServiceListOptions) ([]swarm.Service, error) {
	f.count("ServiceList")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []swarm.Service
	for _, s := range f.services {
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeSwarm) ServiceInspectWithRaw(_ context.Context, id string, _ swarm.ServiceInspectOptions) (swarm.Service, []byte, error) {
	f.count("ServiceInspect")
	f.count("ServiceInspect " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.services[id]
	if !ok {
		return swarm.Service{}, nil, fmt.Errorf("service %s: %w", id, cerrdefs.ErrNotFound)
	}
	return s, nil, nil
}

func (f *fakeSwarm) TaskList(_ context.Context, o swarm.TaskListOptions) ([]swarm.Task, error) {
	f.count("TaskList")
	f.mu.Lock()
	defer f.mu.Unlock()
	svc := o.Filters.Get("service")
	var out []swarm.Task
	for _, t := range f.tasks {
		if len(svc) == 0 || svc[0] == t.ServiceID {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeSwarm) TaskInspectWithRaw(_ context.Context, id string) (swarm.Task, []byte, error) {
	f.count("TaskInspect")
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		return swarm.Task{}, nil, fmt.Errorf("task %s: %w", id, cerrdefs.ErrNotFound)
	}
	return t, nil, nil
}

// ContainerList understands the label filters the adapter uses: "key" and
// "key=value".
func (f *fakeSwarm) ContainerList(_ context.Context, o container.ListOptions) ([]container.Summary, error) {
	f.count("ContainerList")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []container.Summary
	for _, c := range f.containers {
		match := true
		for _, l := range o.Filters.Get("label") {
			k, v, hasValue := strings.Cut(l, "=")
			got, ok := c.Labels[k]
			if !ok || hasValue && got != v {
				match = false
			}
		}
		if match {
			out = append(out, c)
		}
	}
	return out, nil
}

// ServiceUpdate takes the spec at the service's current version and
// refuses any other, as Swarm does ("update out of sequence").
func (f *fakeSwarm) ServiceUpdate(_ context.Context, id string, v swarm.Version, spec swarm.ServiceSpec, _ swarm.ServiceUpdateOptions) (swarm.ServiceUpdateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beforeUpdate != nil {
		f.beforeUpdate()
	}
	if f.updateErr != nil {
		f.calls["ServiceUpdate failed"]++
		return swarm.ServiceUpdateResponse{}, f.updateErr
	}
	s, ok := f.services[id]
	if !ok {
		return swarm.ServiceUpdateResponse{}, fmt.Errorf("service %s: %w", id, cerrdefs.ErrNotFound)
	}
	if s.Version.Index != v.Index {
		f.calls["ServiceUpdate refused"]++
		return swarm.ServiceUpdateResponse{}, fmt.Errorf("Error response from daemon: rpc error: code = Unknown desc = update out of sequence")
	}
	f.calls["ServiceUpdate"]++
	s.Spec, s.Version.Index = spec, s.Version.Index+1
	f.services[id] = s
	return swarm.ServiceUpdateResponse{}, nil
}

func (f *fakeSwarm) ClientVersion() string { return "1.51" }

func (f *fakeSwarm) ServerVersion(context.Context) (types.Version, error) {
	f.count("ServerVersion")
	return types.Version{Version: "29.0.0-beta.18", APIVersion: "1.55"}, nil
}
func (f *fakeSwarm) Close() error { return nil }

// ---- building blocks ----------------------------------------------------------

var overlay = swarm.Network{ID: "net-front", Spec: swarm.NetworkSpec{Annotations: swarm.Annotations{Name: "front"}}}

var ingress = swarm.Network{ID: "net-ingress", Spec: swarm.NetworkSpec{Annotations: swarm.Annotations{Name: "ingress"}, Ingress: true}}

func replicated(id, name string, replicas uint64, labels map[string]string) swarm.Service {
	return swarm.Service{
		ID: id,
		Spec: swarm.ServiceSpec{
			Annotations: swarm.Annotations{Name: name, Labels: labels},
			Mode:        swarm.ServiceMode{Replicated: &swarm.ReplicatedService{Replicas: &replicas}},
		},
		Endpoint: swarm.Endpoint{VirtualIPs: []swarm.EndpointVirtualIP{
			{NetworkID: overlay.ID, Addr: "10.0.1.2/24"},
			{NetworkID: ingress.ID, Addr: "10.0.0.2/24"},
		}},
	}
}

// task is task number slot of service svc on node, in state with the
// desired state desired, at 10.0.1.<10+slot> on the overlay (and on
// ingress).
func task(svc string, slot int, node string, state, desired swarm.TaskState) swarm.Task {
	return swarm.Task{
		ID:           fmt.Sprintf("%s-t%d", svc, slot),
		ServiceID:    svc,
		Slot:         slot,
		NodeID:       node,
		DesiredState: desired,
		Status:       swarm.TaskStatus{State: state, ContainerStatus: &swarm.ContainerStatus{ContainerID: "c-" + fmt.Sprintf("%s-t%d", svc, slot)}},
		NetworksAttachments: []swarm.NetworkAttachment{
			{Network: ingress, Addresses: []string{fmt.Sprintf("10.0.0.%d/24", 10+slot)}},
			{Network: overlay, Addresses: []string{fmt.Sprintf("10.0.1.%d/24", 10+slot)}},
		},
	}
}

// taskContainer is the local container of t, in the listing's words.
func taskContainer(t swarm.Task, state, status string) container.Summary {
	return container.Summary{
		ID:     "c-" + t.ID,
		State:  state,
		Status: status,
		Labels: map[string]string{labelTaskID: t.ID, labelServiceID: t.ServiceID},
	}
}

// containerEvent is the Engine's event for t's container.
func containerEvent(t swarm.Task, action string, attrs ...string) events.Message {
	a := map[string]string{labelTaskID: t.ID, labelServiceID: t.ServiceID}
	for i := 0; i+1 < len(attrs); i += 2 {
		a[attrs[i]] = attrs[i+1]
	}
	return events.Message{Type: events.ContainerEventType, Action: events.Action(action), Actor: events.Actor{ID: "c-" + t.ID, Attributes: a}}
}

func serviceEvent(id, action string) events.Message {
	return events.Message{Type: events.ServiceEventType, Action: events.Action(action), Actor: events.Actor{ID: id}}
}
