package swarm

import (
	"sync"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// scaleIndex is what the Scaler knows of the services it may scale, kept
// by the sessions as they list them: which service each instance name
// belongs to, and each service's policy (caddy.max_replicas and the
// rest, R5j) and replica count. Shared by the sessions and the Scaler,
// under mu.
type scaleIndex struct {
	mu       sync.Mutex
	byName   map[string]string        // instance name -> service ID
	services map[string]*scaleService // by service ID
}

// scaleService is one service as the index keeps it.
type scaleService struct {
	name     string
	names    []string // its instances' names
	policy   catalog.Replicas
	replicas int // -1: a global service
	// bad is the value of the label warned about ("" none), so that a
	// label is warned about once per value.
	badLabel, badValue string
}

func newScaleIndex() *scaleIndex {
	return &scaleIndex{byName: map[string]string{}, services: map[string]*scaleService{}}
}

// set records svc and the names of its instances; it returns the label
// of svc that is not valid, if it was not warned about yet ("" else).
func (x *scaleIndex) set(svc *service, insts []catalog.Instance) (warn string) {
	policy, bad := catalog.ParseReplicas(svc.labels)
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.services[svc.id]
	if old != nil {
		for _, n := range old.names {
			delete(x.byName, n)
		}
	}
	s := &scaleService{name: svc.name, policy: policy, replicas: svc.replicas}
	if bad != "" {
		s.badLabel, s.badValue = bad, svc.labels[bad]
		if old == nil || old.badLabel != bad || old.badValue != s.badValue {
			warn = bad
		}
	}
	for _, in := range insts {
		s.names = append(s.names, in.Name)
		x.byName[in.Name] = svc.id
	}
	x.services[svc.id] = s
	return warn
}

// add records one more instance of the service id (a task re-read).
func (x *scaleIndex) add(id, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.services[id]; s != nil {
		if _, ok := x.byName[name]; !ok {
			s.names = append(s.names, name)
		}
		x.byName[name] = id
	}
}

// remove forgets a removed service.
func (x *scaleIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.services[id]; s != nil {
		for _, n := range s.names {
			delete(x.byName, n)
		}
	}
	delete(x.services, id)
}

// load sums the requests in flight to the instances of sleepers (those
// with an Activity) by service to scale.
func (x *scaleIndex) load(sleepers []catalog.Sleeper) map[string]int {
	out := map[string]int{}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, sl := range sleepers {
		id := x.byName[sl.Name]
		if s := x.services[id]; s != nil && s.scaled() && sl.Activity != nil {
			out[id] += sl.Activity.InFlight()
		}
	}
	return out
}

// pick returns the first service to scale among targets' (in their
// order) that was below its caddy.max_replicas at its last listing (one
// at its max is not inspected again and again under load), and how many
// of targets are its tasks. One lock, whatever the number of targets.
func (x *scaleIndex) pick(targets []catalog.Target) (id string, routable int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range targets {
		sid := x.byName[t.Instance]
		s := x.services[sid]
		if s == nil || !s.scaled() || s.replicas >= s.policy.Max {
			continue
		}
		if id == "" {
			id = sid
		}
		if sid == id {
			routable++
		}
	}
	return id, routable
}

// scaled says whether the service is one to scale.
func (s *scaleService) scaled() bool { return s.policy.Max > 0 && s.replicas >= 0 }

// scaledService is a service to scale, as scaledServices reports it.
type scaledService struct {
	id, name string
	policy   catalog.Replicas
	replicas int
}

// scaledServices appends to dst every service to scale.
func (x *scaleIndex) scaledServices(dst []scaledService) []scaledService {
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, s := range x.services {
		if s.scaled() {
			dst = append(dst, scaledService{id: id, name: s.name, policy: s.policy, replicas: s.replicas})
		}
	}
	return dst
}
