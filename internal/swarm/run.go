// Package swarm is the adapter for Docker Swarm mode: it follows a swarm
// manager's service, node and (local) task container events and translates
// services and their tasks into catalog.Instance values fed to a
// catalog.Sink. It shares the Docker adapter's connection settings and
// translation of containers, knows nothing of routing rules or of Caddy,
// and only reads from the Engine, but for the replica counts of the
// services labelled caddy.max_replicas (the Scaler, R5j).
package swarm

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/swarm"
	"github.com/docker/docker/api/types/system"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// engine is the part of the Engine API the adapter uses; *client.Client
// implements it.
type engine interface {
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	Info(ctx context.Context) (system.Info, error)
	ServiceList(ctx context.Context, options swarm.ServiceListOptions) ([]swarm.Service, error)
	ServiceInspectWithRaw(ctx context.Context, serviceID string, options swarm.ServiceInspectOptions) (swarm.Service, []byte, error)
	TaskList(ctx context.Context, options swarm.TaskListOptions) ([]swarm.Task, error)
	TaskInspectWithRaw(ctx context.Context, taskID string) (swarm.Task, []byte, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	// ServerVersion tells the Engine's own API version (R9a): the
	// client's negotiated one is older than a newer Engine's.
	ServerVersion(ctx context.Context) (types.Version, error)
	ClientVersion() string
	Close() error
}

// Adapter follows one swarm manager, read-only.
type Adapter struct {
	docker     *docker.Adapter
	endpoint   string
	converging time.Duration
	resync     time.Duration
	nodeProbe  time.Duration // negative: no node watch
	key        string
	labels     foreignlabels.Set // the label sets read (R2f)
	follow     selector.Selector // the services seen (R2g, docker.Config.Follow)
	// index is what the sessions tell the Scaler of the services (R5j).
	index *scaleIndex
	// wrap, if set, wraps each session's client (tests).
	wrap func(engine) engine
	// dial opens the node watch's probe connections (tests replace it).
	dial dialFunc
}

// New checks cfg and reads its TLS files. Each error names the setting at
// fault.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	d, err := docker.New(cfg.Docker)
	if err != nil {
		return nil, err
	}
	a := &Adapter{docker: d, endpoint: cfg.Endpoint, converging: cfg.Converging, resync: cfg.Resync,
		nodeProbe: cfg.NodeProbe, dial: (&net.Dialer{}).DialContext, index: newScaleIndex(), labels: cfg.Docker.Labels,
		follow: cfg.Docker.Follow}
	if a.endpoint == "" {
		a.endpoint = EndpointTasks
	}
	if a.converging == 0 {
		a.converging = DefaultConverging
	}
	if a.resync == 0 {
		a.resync = DefaultResync
	}
	if a.nodeProbe == 0 {
		a.nodeProbe = DefaultNodeProbe
	}
	a.key = follow.Key("swarm", d.Key(), a.endpoint, a.converging.String(), a.resync.String(), a.nodeProbe.String())
	return a, nil
}

// Address is the Engine endpoint.
func (a *Adapter) Address() string { return a.docker.Address() }

// Key identifies every setting that shapes the connection: equal keys can
// share one.
func (a *Adapter) Key() string { return a.key }

// EngineKey identifies the swarm manager reached (docker.Adapter's
// EngineKey): connections with equal EngineKeys scale the same services,
// and share their load (LoadBook).
func (a *Adapter) EngineKey() string { return a.docker.EngineKey() }

// Loop returns the loop that follows the swarm: its Run(ctx, sink, log)
// feeds sink until ctx is done (see follow.Loop).
//
// Each session subscribes to the Engine's service, node and container
// events, lists every service, task and local task container (three
// calls), then re-lists only what an event names: one service's tasks for
// a service event (two calls and one for the local containers), one task
// for its container's event. Services whose tasks are not where Swarm
// wants them are re-listed every Converging until they are, the others
// every Resync, one service at a time: the changes Swarm sends no event
// for (a task on another node) reach the routes within those bounds.
func (a *Adapter) Loop() *follow.Loop {
	l := a.docker.Loop()
	l.Daemon = a
	l.Name, l.Things, l.Thing = "Docker Swarm manager", "instances", "instance"
	return l
}

// Connect implements follow.Daemon.
func (a *Adapter) Connect(_ context.Context, log *zap.Logger) (follow.Conn, error) {
	cli, err := a.docker.NewClient()
	if err != nil {
		return nil, err
	}
	var eng engine = cli
	if a.wrap != nil {
		eng = a.wrap(eng)
	}
	c := &conn{
		eng: eng, log: log, endpoint: a.endpoint, converging: a.converging, resync: a.resync,
		services: map[string]*service{}, members: map[string]map[string]struct{}{},
		taskService: map[string]string{}, taskNode: map[string]string{},
		due: newSchedule(), index: a.index, labels: a.labels,
		follow: a.follow,
	}
	if a.endpoint == EndpointTasks && a.nodeProbe > 0 {
		c.watch = newNodeWatch(a.nodeProbe, a.dial)
	}
	return c, nil
}

// Explain implements follow.Daemon: the Engine's explanations, and what a
// node that is no swarm manager means.
func (a *Adapter) Explain(err error) follow.End {
	e := docker.Explain(err)
	if strings.Contains(e.Reason, "not a swarm manager") || strings.Contains(e.Reason, "not part of a swarm") {
		e.Reason = "the Engine is not a swarm manager (dynamic swarm follows a manager node; run Caddy against one): " + e.Reason
	}
	return e
}

// conn is one session's connection to a swarm manager. Its maps are used
// only by the session's goroutine; due is shared with the stream's.
type conn struct {
	eng    engine
	log    *zap.Logger
	labels foreignlabels.Set // the label sets read (R2f)
	// follow is the selector of the services seen (R2g); unfollowed holds
	// the services found not to match it, whose task containers' events
	// the stream drops. A service's labels can change (docker service
	// update): its own events are always read, and each re-listing of it
	// decides again.
	follow     selector.Selector
	unfollowed unfollowed
	endpoint   string
	converging time.Duration
	resync     time.Duration
	nodeID     string // this node's, for its task containers

	services    map[string]*service            // by ID
	members     map[string]map[string]struct{} // service ID -> IDs of its task instances
	taskService map[string]string              // task ID -> service ID
	taskNode    map[string]string              // task ID -> node ID
	// taskContainer is each task's container ID as Swarm records it
	// (containerOf; task ID -> string), written by the session, read by
	// the stream: an event of another container carrying a task's labels
	// (a look-alike anyone can run, R2g) is not that task's.
	taskContainer sync.Map
	due           *schedule
	watch         *nodeWatch // nil: no node watch (R11t)
	index         *scaleIndex
	// version is what the Engine's /version said, once per session
	// (R9a); zero until it answered.
	version daemonver.Version
}

func (c *conn) Close() error { return c.eng.Close() }

// eventFilters asks for service and node changes and for the container
// events the Docker adapter reads (task containers are told apart by
// their labels; others are ignored).
func eventFilters() filters.Args {
	f := filters.NewArgs(
		filters.Arg("type", string(events.ServiceEventType)),
		filters.Arg("type", string(events.NodeEventType)),
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("event", string(events.ActionUpdate)),
		filters.Arg("event", string(events.ActionRemove)),
	)
	docker.AddContainerActions(f) // create among them
	return f
}

// Group names.
const (
	groupService = "service/"
	groupNode    = "node/"
)

// Subscribe asks for the events since just before subscribing (see the
// Docker adapter), and ticks the reconciliation: each service due is
// reported as a group to sync.
func (c *conn) Subscribe(ctx context.Context) (follow.Stream, error) {
	since := time.Now()
	msgs, errs := c.eng.Events(ctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: eventFilters(),
	})
	tick := max(c.converging/5, 20*time.Millisecond)
	return func(report func(follow.Event)) error {
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		var lostNodes <-chan struct{}
		if c.watch != nil {
			wctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); c.watch.run(wctx, c.log) }()
			defer func() { stop(); <-done }()
			lostNodes = c.watch.notify
		}
		for {
			select {
			case <-lostNodes:
				// A node lost or answering again: its services re-listed,
				// their tasks there marked by the verdict.
				for _, node := range c.watch.takeChanged() {
					report(follow.Event{Group: groupNode + node})
				}
			case err, ok := <-errs:
				if !ok || err == nil {
					err = io.EOF
				}
				return follow.WrapCall("Events", err)
			case now := <-ticker.C:
				for _, id := range c.due.take(now) {
					report(follow.Event{Group: groupService + id})
				}
			case m := <-msgs:
				if ev, ok := c.event(m); ok {
					report(ev)
				}
			}
		}
	}, nil
}

// event says what an Engine event tells: a service's change names the
// service, a node's the node, a task container's the task (with the
// Docker adapter's reading of it: stopping, started, destroyed). With the
// endpoint "vip" a task container's event names its service.
func (c *conn) event(m events.Message) (follow.Event, bool) {
	switch m.Type {
	case events.ServiceEventType:
		if m.Actor.ID != "" {
			return follow.Event{Group: groupService + m.Actor.ID}, true
		}
	case events.NodeEventType:
		if m.Actor.ID != "" {
			return follow.Event{Group: groupNode + m.Actor.ID}, true
		}
	case events.ContainerEventType:
		task, svc := m.Actor.Attributes[labelTaskID], m.Actor.Attributes[labelServiceID]
		if task == "" {
			return follow.Event{}, false // not a task's container
		}
		if known, ok := c.taskContainer.Load(task); ok && known.(string) != "" && known.(string) != m.Actor.ID {
			return follow.Event{}, false // a look-alike of the task's container (R2g)
		}
		if c.unfollowed.has(svc) {
			return follow.Event{}, false // a service not followed (R2g)
		}
		ev, ok := docker.ContainerEvent(m)
		if !ok {
			return follow.Event{}, false
		}
		if c.endpoint == EndpointVIP {
			if svc == "" {
				return follow.Event{}, false
			}
			return follow.Event{Group: groupService + svc}, true
		}
		// A task's container is never restarted (Swarm starts a new task):
		// its destroy ends the task.
		ev.ID = task
		return ev, true
	}
	return follow.Event{}, false
}

// versionTimeout bounds the /version call (R9a).
const versionTimeout = 5 * time.Second

// List lists every service, every task and this node's task containers.
func (c *conn) List(ctx context.Context) (follow.Listing, error) {
	info, err := c.eng.Info(ctx)
	if err != nil {
		return follow.Listing{}, follow.WrapCall("Info", err)
	}
	c.nodeID = info.Swarm.NodeID
	if c.watch != nil {
		c.watch.setLocal(c.nodeID)
	}
	svcs, err := c.eng.ServiceList(ctx, swarm.ServiceListOptions{})
	if err != nil {
		return follow.Listing{}, follow.WrapCall("ServiceList", err)
	}
	tasks, err := c.eng.TaskList(ctx, swarm.TaskListOptions{})
	if err != nil {
		return follow.Listing{}, follow.WrapCall("TaskList", err)
	}
	locals, err := c.localContainers(ctx, filters.Arg("label", labelTaskID))
	if err != nil {
		return follow.Listing{}, err
	}
	byService := map[string][]swarm.Task{}
	for _, t := range tasks {
		byService[t.ServiceID] = append(byService[t.ServiceID], t)
	}
	var all []catalog.Instance
	now := time.Now()
	unfollowed := map[string]struct{}{}
	for _, s := range svcs {
		if !c.follows(s) {
			unfollowed[s.ID] = struct{}{} // not followed (R2g): not scheduled either
			continue
		}
		svc := c.service(s)
		insts, converging := c.keep(svc, byService[s.ID], locals)
		all = append(all, insts...)
		// Settled services' re-listings are spread over Resync.
		c.schedule(svc.id, converging, now, rand.N(c.resync)+1)
	}
	notFollowed := len(unfollowed) // counted before the stream may change the set
	c.unfollowed.replace(unfollowed)
	fields := []zap.Field{zap.Int("services", len(svcs)), zap.Int("tasks", len(tasks)),
		zap.String("endpoint", c.endpoint), zap.String("api_version", c.eng.ClientVersion())}
	if !c.follow.Empty() {
		// R2g: which services this connection sees, and how many it left out.
		fields = append(fields, zap.Stringer("follow", c.follow), zap.Int("not_followed", notFollowed))
	}
	// R9a: the manager's version and the API version it serves, from
	// /version once per session (Docker 29 serves 1.55, where the client
	// negotiated its own 1.51); without an answer, /info's version with
	// the negotiated API (the server's when it is older than the client's).
	if c.version.Zero() {
		vctx, cancel := context.WithTimeout(ctx, versionTimeout)
		v, err := c.eng.ServerVersion(vctx)
		cancel()
		if err == nil && v.APIVersion != "" {
			c.version = daemonver.New("Docker Engine", v.Version, v.APIVersion)
		}
	}
	version := c.version
	if version.Zero() {
		version = daemonver.New("Docker Engine", info.ServerVersion, c.eng.ClientVersion())
	}
	return follow.Listing{Instances: all, Fields: fields, Version: version}, nil
}

// keep translates a service and its tasks and records what the session
// needs to know of them.
func (c *conn) keep(svc *service, tasks []swarm.Task, locals map[string]local) (insts []catalog.Instance, converging bool) {
	insts, converging = translateService(svc, tasks, locals, c.endpoint)
	c.watchNodes(svc.id, tasks, insts[1:])
	c.services[svc.id] = svc
	members := map[string]struct{}{}
	for _, in := range insts[1:] {
		members[in.ID] = struct{}{}
	}
	for _, t := range tasks {
		if _, ok := members[t.ID]; ok {
			c.taskService[t.ID], c.taskNode[t.ID] = svc.id, t.NodeID
			c.taskContainer.Store(t.ID, containerOf(t))
		}
	}
	c.members[svc.id] = members
	if bad := c.index.set(svc, insts); bad != "" {
		c.log.Warn("label "+bad+" is not valid and is ignored (caddy.max_replicas: a whole number from 1 to "+
			strconv.Itoa(catalog.MaxReplicas)+", without which the service is never scaled; caddy.min_replicas: "+
			"from 1 to caddy.max_replicas, else 1)",
			zap.String("service", svc.name), zap.String(bad, catalog.ClipLabel(svc.labels[bad])))
	}
	return insts, converging
}

// schedule sets when a service's tasks are re-listed next: after
// Converging while it converges, else after settled (Resync, or a part of
// it to spread the first re-listings).
func (c *conn) schedule(id string, converging bool, now time.Time, settled time.Duration) {
	if converging {
		c.due.set(id, now.Add(c.converging))
		return
	}
	c.due.set(id, now.Add(settled))
}

// localContainers lists this node's task containers matching f (all of
// them, stopped ones too) and returns their state and health by container
// ID: a task's is the one its ContainerStatus names (containerOf), never
// another that carries its labels (anyone can write them, R2g). One whose
// health the listing does not tell is left out (the task's own state
// stands).
func (c *conn) localContainers(ctx context.Context, f ...filters.KeyValuePair) (map[string]local, error) {
	list, err := c.eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(f...)})
	if err != nil {
		return nil, follow.WrapCall("ContainerList", err)
	}
	out := make(map[string]local, len(list))
	for _, s := range list {
		if s.Labels[labelTaskID] == "" {
			continue
		}
		st, h, known := docker.SummaryState(s)
		if known {
			out[s.ID] = local{state: st, health: h}
		}
	}
	return out, nil
}

// Sync implements follow.GroupConn: a service's tasks re-listed (a
// removed service's instances all gone), or for a node, those of every
// service with a task on it.
func (c *conn) Sync(ctx context.Context, group string) ([]catalog.Instance, []string, error) {
	if id, ok := strings.CutPrefix(group, groupService); ok {
		return c.syncService(ctx, id)
	}
	if node, ok := strings.CutPrefix(group, groupNode); ok {
		seen := map[string]bool{}
		var current []catalog.Instance
		var gone []string
		for task, n := range c.taskNode {
			svc := c.taskService[task]
			if n != node || seen[svc] {
				continue
			}
			seen[svc] = true
			cur, g, err := c.syncService(ctx, svc)
			if err != nil {
				return nil, nil, err
			}
			current, gone = append(current, cur...), append(gone, g...)
		}
		return current, gone, nil
	}
	return nil, nil, fmt.Errorf("unknown group %q", group)
}

// syncService re-lists one service's tasks: three calls, whatever the
// size of the swarm.
func (c *conn) syncService(ctx context.Context, id string) ([]catalog.Instance, []string, error) {
	s, _, err := c.eng.ServiceInspectWithRaw(ctx, id, swarm.ServiceInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		c.unfollowed.set(id, false)
		return nil, c.forget(id), nil
	}
	if err != nil {
		return nil, nil, follow.WrapCall("ServiceInspect", err)
	}
	if !c.follows(s) {
		// Not followed (R2g), or no longer: its instances leave.
		c.unfollowed.set(id, true)
		return nil, c.forget(id), nil
	}
	c.unfollowed.set(id, false)
	tasks, err := c.eng.TaskList(ctx, swarm.TaskListOptions{Filters: filters.NewArgs(filters.Arg("service", id))})
	if err != nil {
		return nil, nil, follow.WrapCall("TaskList", err)
	}
	locals, err := c.localContainers(ctx, filters.Arg("label", labelServiceID+"="+id))
	if err != nil {
		return nil, nil, err
	}
	old := c.members[id]
	insts, converging := c.keep(c.service(s), tasks, locals)
	var gone []string
	for task := range old {
		if _, ok := c.members[id][task]; !ok {
			gone = append(gone, task)
			delete(c.taskService, task)
			delete(c.taskNode, task)
			c.taskContainer.Delete(task)
		}
	}
	c.schedule(id, converging, time.Now(), c.resync)
	return insts, gone, nil
}

// forget drops a removed service and returns the IDs of its instances.
func (c *conn) forget(id string) []string {
	gone := []string{}
	if _, ok := c.services[id]; ok {
		gone = append(gone, id)
	}
	for task := range c.members[id] {
		gone = append(gone, task)
		delete(c.taskService, task)
		delete(c.taskNode, task)
		c.taskContainer.Delete(task)
	}
	delete(c.services, id)
	delete(c.members, id)
	c.index.remove(id)
	c.due.remove(id)
	if c.watch != nil {
		c.watch.setService(id, nil)
	}
	return gone
}

// watchNodes gives the node watch a service's task instances on other
// nodes to probe, and marks those on a lost node unhealthy: they leave the
// rotations until their node answers again (R11t).
func (c *conn) watchNodes(id string, tasks []swarm.Task, insts []catalog.Instance) {
	if c.watch == nil {
		return
	}
	node := make(map[string]string, len(tasks))
	for _, t := range tasks {
		node[t.ID] = t.NodeID
	}
	targets := map[string]probeTarget{}
	for i := range insts {
		in := &insts[i]
		n := node[in.ID]
		if n == "" || n == c.nodeID || in.State != catalog.StateRunning {
			continue
		}
		if addr := probeAddr(*in); addr != "" {
			targets[in.ID] = probeTarget{node: n, addr: addr}
		}
		if c.watch.isLost(n) {
			in.Health = catalog.HealthUnhealthy
		}
	}
	c.watch.setService(id, targets)
}

// Fetch re-reads one task, which its container's event named: the task
// and, on this node, its container. It is gone (ErrNotFound) once it is
// no instance any more.
func (c *conn) Fetch(ctx context.Context, id string) (catalog.Instance, error) {
	t, _, err := c.eng.TaskInspectWithRaw(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return catalog.Instance{}, follow.WrapCall("TaskInspect", follow.ErrNotFound)
	}
	if err != nil {
		return catalog.Instance{}, follow.WrapCall("TaskInspect", err)
	}
	if c.unfollowed.has(t.ServiceID) {
		return catalog.Instance{}, follow.WrapCall("TaskInspect", follow.ErrUnusable) // not followed (R2g)
	}
	svc, ok := c.services[t.ServiceID]
	if !ok {
		// A service created a moment ago: its own event syncs it.
		c.due.set(t.ServiceID, time.Now())
		return catalog.Instance{}, follow.WrapCall("TaskInspect", follow.ErrNotFound)
	}
	var lc *local
	if t.NodeID == c.nodeID {
		locals, err := c.localContainers(ctx, filters.Arg("label", labelTaskID+"="+id))
		if err != nil {
			return catalog.Instance{}, err
		}
		if l, ok := locals[containerOf(t)]; ok {
			lc = &l
		}
	}
	in, ok := fromTask(svc, t, lc)
	if !settled(t) {
		c.schedule(svc.id, true, time.Now(), 0)
	}
	if !ok {
		delete(c.members[svc.id], id)
		delete(c.taskService, id)
		delete(c.taskNode, id)
		c.taskContainer.Delete(id)
		return catalog.Instance{}, follow.WrapCall("TaskInspect", follow.ErrNotFound)
	}
	if c.members[svc.id] == nil {
		c.members[svc.id] = map[string]struct{}{}
	}
	c.members[svc.id][id] = struct{}{}
	c.taskService[id], c.taskNode[id] = svc.id, t.NodeID
	c.taskContainer.Store(id, containerOf(t))
	c.index.add(svc.id, in.Name)
	return in, nil
}

// Refresh has nothing to do: the stream reports no daemon-wide change.
func (c *conn) Refresh(context.Context, map[string]catalog.Instance) ([]catalog.Instance, error) {
	return nil, nil
}

// schedule is when each service's tasks are re-listed next, shared by the
// session (which sets it after each re-listing) and the stream (which
// reports the services due).
type schedule struct {
	mu  sync.Mutex
	due map[string]time.Time
}

func newSchedule() *schedule { return &schedule{due: map[string]time.Time{}} }

// set sets when id is due; an earlier time already set stands.
func (s *schedule) set(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.due[id]; !ok || at.Before(cur) || cur.IsZero() {
		s.due[id] = at
	}
}

func (s *schedule) remove(id string) {
	s.mu.Lock()
	delete(s.due, id)
	s.mu.Unlock()
}

// take returns the services due at now and marks them in progress (no
// time) until the re-listing sets their next.
func (s *schedule) take(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, at := range s.due {
		if !at.IsZero() && !at.After(now) {
			out = append(out, id)
			s.due[id] = time.Time{}
		}
	}
	return out
}

// Interface guards
var (
	_ follow.Daemon    = (*Adapter)(nil)
	_ follow.GroupConn = (*conn)(nil)
)
