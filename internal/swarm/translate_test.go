package swarm

import (
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/swarm"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

const (
	running  = swarm.TaskStateRunning
	starting = swarm.TaskStateStarting
	shutdown = swarm.TaskStateShutdown
	failed   = swarm.TaskStateFailed
)

func byID(insts []catalog.Instance) map[string]catalog.Instance {
	m := map[string]catalog.Instance{}
	for _, in := range insts {
		m[in.ID] = in
	}
	return m
}

func TestTranslateService(t *testing.T) {
	web := fromService(replicated("web", "web", 2, map[string]string{catalog.LabelHost: "web.example.com", catalog.LabelPort: "8080"}))
	tests := []struct {
		name       string
		tasks      []swarm.Task
		locals     map[string]local
		endpoint   string
		want       map[string]catalog.Instance // tasks only; nil entries: absent
		converging bool
	}{
		{
			name:  "running tasks at their overlay address, ingress left out",
			tasks: []swarm.Task{task("web", 1, "n2", running, running), task("web", 2, "n2", running, running)},
			want: map[string]catalog.Instance{
				"web-t1": {Name: "web.1.web-t1", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "front", Address: "10.0.1.11"}}},
				"web-t2": {Name: "web.2.web-t2", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "front", Address: "10.0.1.12"}}},
			},
		},
		{
			name:       "a starting task is an instance, not running; the service converges",
			tasks:      []swarm.Task{task("web", 1, "n2", running, running), task("web", 2, "n2", starting, running)},
			want:       map[string]catalog.Instance{"web-t1": {State: catalog.StateRunning}, "web-t2": {State: catalog.StateStarting}},
			converging: true,
		},
		{
			name: "a task being shut down leaves at once; the service converges until it has ended",
			tasks: []swarm.Task{
				task("web", 1, "n2", running, running), task("web", 2, "n2", running, running),
				task("web", 3, "n2", running, shutdown),
			},
			want:       map[string]catalog.Instance{"web-t1": {State: catalog.StateRunning}, "web-t2": {State: catalog.StateRunning}},
			converging: true,
		},
		{
			name: "ended tasks (history) are no instances and settled",
			tasks: []swarm.Task{
				task("web", 1, "n2", running, running), task("web", 2, "n2", running, running),
				task("web", 3, "n2", shutdown, shutdown), task("web", 4, "n2", failed, shutdown),
			},
			want: map[string]catalog.Instance{"web-t1": {State: catalog.StateRunning}, "web-t2": {State: catalog.StateRunning}},
		},
		{
			name:       "fewer tasks than replicas: converging",
			tasks:      []swarm.Task{task("web", 1, "n2", running, running)},
			want:       map[string]catalog.Instance{"web-t1": {State: catalog.StateRunning}},
			converging: true,
		},
		{
			name:  "a local task's container tells its state and health",
			tasks: []swarm.Task{task("web", 1, "local", running, running), task("web", 2, "local", starting, running)},
			locals: map[string]local{
				"c-web-t1": {state: catalog.StateRunning, health: catalog.HealthUnhealthy},
				"c-web-t2": {state: catalog.StateRunning, health: catalog.HealthHealthy},
			},
			want: map[string]catalog.Instance{
				"web-t1": {State: catalog.StateRunning, Health: catalog.HealthUnhealthy},
				"web-t2": {State: catalog.StateRunning, Health: catalog.HealthHealthy},
			},
			converging: true, // Swarm still says starting
		},
		{
			name:     "vip: no task instances",
			tasks:    []swarm.Task{task("web", 1, "n2", running, running), task("web", 2, "n2", running, running)},
			endpoint: EndpointVIP,
			want:     map[string]catalog.Instance{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endpoint := tt.endpoint
			if endpoint == "" {
				endpoint = EndpointTasks
			}
			out, converging := translateService(web, tt.tasks, tt.locals, endpoint)
			if converging != tt.converging {
				t.Errorf("converging = %v, want %v", converging, tt.converging)
			}
			got := byID(out)
			svc, ok := got["web"]
			if !ok || svc.Name != "web" || svc.Labels[catalog.LabelHost] != "web.example.com" {
				t.Fatalf("service instance = %+v, %v; want the service with its labels", svc, ok)
			}
			if endpoint == EndpointTasks && svc.State != catalog.StateStopped {
				t.Errorf("tasks endpoint: the service instance is %v, want stopped (never routed to)", svc.State)
			}
			delete(got, "web")
			if len(got) != len(tt.want) {
				t.Fatalf("task instances %v, want %v", got, tt.want)
			}
			for id, w := range tt.want {
				g, ok := got[id]
				switch {
				case !ok:
					t.Errorf("%s missing", id)
				case g.State != w.State || g.Health != w.Health:
					t.Errorf("%s: %v/%v, want %v/%v", id, g.State, g.Health, w.State, w.Health)
				case w.Name != "" && g.Name != w.Name:
					t.Errorf("%s: name %q, want %q", id, g.Name, w.Name)
				case w.Networks != nil && (len(g.Networks) != 1 || g.Networks[0] != w.Networks[0]):
					t.Errorf("%s: networks %v, want %v", id, g.Networks, w.Networks)
				case g.Labels["caddy.port"] != "8080":
					t.Errorf("%s: labels %v, want the service's", id, g.Labels)
				}
			}
		})
	}
}

// With the endpoint "vip" the service is routed to at its virtual IP on
// its tasks' networks (not ingress's), while one task is routable.
func TestTranslateServiceVIP(t *testing.T) {
	web := fromService(replicated("web", "web", 2, nil))
	for _, tt := range []struct {
		name  string
		tasks []swarm.Task
		want  catalog.State
	}{
		{"a running task", []swarm.Task{task("web", 1, "n2", running, running), task("web", 2, "n2", starting, running)}, catalog.StateRunning},
		{"no running task", []swarm.Task{task("web", 1, "n2", starting, running)}, catalog.StateStopped},
	} {
		out, _ := translateService(web, tt.tasks, nil, EndpointVIP)
		if len(out) != 1 {
			t.Fatalf("%s: %d instances, want the service alone", tt.name, len(out))
		}
		svc := out[0]
		if svc.State != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, svc.State, tt.want)
		}
		if len(svc.Networks) != 1 || svc.Networks[0] != (catalog.Attachment{Network: "front", Address: "10.0.1.2"}) {
			t.Errorf("%s: networks %v, want front at 10.0.1.2", tt.name, svc.Networks)
		}
	}
}

func TestTaskName(t *testing.T) {
	svc := &service{name: "web"}
	if got := taskName(svc, swarm.Task{ID: "abc", Slot: 3, NodeID: "n1"}); got != "web.3.abc" {
		t.Errorf("replicated: %q", got)
	}
	if got := taskName(svc, swarm.Task{ID: "abc", NodeID: "n1"}); got != "web.n1.abc" {
		t.Errorf("global: %q", got)
	}
}

// TestTaskIdentity_R4d: a task's identity for sticky sessions is its
// service and slot, which its replacement takes over (another task ID).
func TestTaskIdentity_R4d(t *testing.T) {
	svc := &service{name: "web"}
	running := swarm.Task{ID: "abc", Slot: 3, DesiredState: swarm.TaskStateRunning, Status: swarm.TaskStatus{State: swarm.TaskStateRunning}}
	replacement := running
	replacement.ID = "def"
	a, okA := fromTask(svc, running, nil)
	b, okB := fromTask(svc, replacement, nil)
	if !okA || !okB || a.Identity != "web.3" || b.Identity != "web.3" || a.Name == b.Name {
		t.Errorf("identities %q (%s) and %q (%s), want web.3 for both under different names", a.Identity, a.Name, b.Identity, b.Name)
	}
}

func TestStripPrefix(t *testing.T) {
	for in, want := range map[string]string{"10.0.1.5/24": "10.0.1.5", "10.0.1.5": "10.0.1.5", "fd00::5/64": "fd00::5", "": "", "x": ""} {
		if got := stripPrefix(in); got != want {
			t.Errorf("stripPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// The events: a service's and a node's name their group; a task
// container's names the task, read as the Docker adapter reads a
// container's (a kill with SIGTERM: stopping at once); other containers'
// are ignored; with the endpoint "vip" a task container's names its
// service.
func TestEvent(t *testing.T) {
	tk := task("web", 1, "local", running, running)
	c := &conn{endpoint: EndpointTasks}
	for _, tt := range []struct {
		name string
		m    events.Message
		want follow.Event
		ok   bool
	}{
		{"service update", serviceEvent("web", "update"), follow.Event{Group: "service/web"}, true},
		{"service remove", serviceEvent("web", "remove"), follow.Event{Group: "service/web"}, true},
		{"node update", events.Message{Type: events.NodeEventType, Action: "update", Actor: events.Actor{ID: "n2"}}, follow.Event{Group: "node/n2"}, true},
		{"task container killed", containerEvent(tk, "kill", "signal", "15"), follow.Event{ID: "web-t1", Stopping: true, Why: "sent SIGTERM to stop (docker stop, or docker kill -s TERM)"}, true},
		{"task container started", containerEvent(tk, "start"), follow.Event{ID: "web-t1", Started: true}, true},
		{"task container health", containerEvent(tk, "health_status: unhealthy"), follow.Event{ID: "web-t1"}, true},
		{"task container destroyed", containerEvent(tk, "destroy"), follow.Event{ID: "web-t1", Deleted: true}, true},
		{"task container SIGHUP", containerEvent(tk, "kill", "signal", "1"), follow.Event{}, false},
		{"plain container", events.Message{Type: events.ContainerEventType, Action: "die", Actor: events.Actor{ID: "x"}}, follow.Event{}, false},
	} {
		got, ok := c.event(tt.m)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	vip := &conn{endpoint: EndpointVIP}
	if got, ok := vip.event(containerEvent(tk, "die")); !ok || got != (follow.Event{Group: "service/web"}) {
		t.Errorf("vip: %+v, %v; want the service's group", got, ok)
	}
}

func TestConfigCheck(t *testing.T) {
	if err := (Config{Endpoint: "dnsrr"}).Check(); err == nil || err.Error() != `endpoint: "dnsrr" is neither tasks nor vip` {
		t.Errorf("bad endpoint: %v", err)
	}
	if err := (Config{Endpoint: EndpointVIP}).Check(); err != nil {
		t.Errorf("vip: %v", err)
	}
	if err := (Config{Docker: dockerConfig("ssh://x")}).Check(); err == nil {
		t.Error("an ssh address passed")
	}
}

// An Engine that is no swarm manager is told as such, naming what to do.
func TestExplainNotManager(t *testing.T) {
	a := &Adapter{}
	e := a.Explain(follow.WrapCall("ServiceList", errors.New("Error response from daemon: This node is not a swarm manager. Use \"docker swarm init\" or \"docker swarm join\" to connect this node to swarm and try again.")))
	if e.Call != "ServiceList" || !strings.HasPrefix(e.Reason, "the Engine is not a swarm manager") || e.Auth {
		t.Errorf("Explain = %+v", e)
	}
}

// A service's caddy-docker-proxy or Traefik deploy.labels become its and
// its tasks' caddy.host and the rest under the `labels` setting (R2f).
func TestService_R2f_label_sets(t *testing.T) {
	s := swarm.Service{ID: "s1", Spec: swarm.ServiceSpec{Annotations: swarm.Annotations{Name: "web",
		Labels: map[string]string{"traefik.http.routers.web.rule": "Host(`a.example.com`) && PathPrefix(`/api`)",
			"traefik.http.services.web.loadbalancer.server.port": "8080"}}}}
	c := &conn{endpoint: EndpointTasks, labels: foreignlabels.SetTraefik}
	sv := c.service(s)
	if sv.labels[catalog.LabelHost] != "a.example.com" || sv.labels[catalog.LabelPath] != "/api" || sv.labels[catalog.LabelPort] != "8080" {
		t.Errorf("traefik read: %v", sv.labels)
	}
	if sv := (&conn{endpoint: EndpointTasks}).service(s); sv.labels[catalog.LabelHost] != "" {
		t.Errorf("default read traefik's labels: %v", sv.labels)
	}
}
