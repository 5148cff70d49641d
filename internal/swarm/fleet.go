package swarm

import (
	"context"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// The fleet's load on a scaled service (R5j): in a fleet of Caddys that
// share a storage, each Caddy's Scaler writes, every sample (a second),
// a lease per scaled service it has requests in flight to, saying how
// many, and reads the others': a service shrinks only when the fleet's
// load fits in one replica fewer, and each of its tasks carries its share
// of the others' load, so that it grows on the fleet's load too. At most
// about two samples old.

// fleetHook is the fleet the Scaler shares its load with.
type fleetHook struct {
	f      *fleet.Fleet
	failed func(op string)
	log    *zap.Logger
	// published is the load last written per lease key (the sample
	// loop's alone).
	published map[string]int
	health    fleet.Health
}

// ShareThrough makes the Scaler share its load with f's fleet; failed, if
// set, hears each failed read or write.
func (s *Scaler) ShareThrough(f *fleet.Fleet, failed func(op string)) {
	if old := s.fleet.Load(); old != nil && old.f == f {
		return // the same fleet: its storage may have changed, which f holds
	}
	s.fleet.Store(&fleetHook{f: f, failed: failed, log: s.log, published: map[string]int{}})
}

// serviceLease names a service's load in the fleet's storage.
func serviceLease(id string) string { return "swarm-service-" + id }

// shareLoad writes this Caddy's load on each scaled service and adds the
// other Caddys' to load; each task's Activity gets its share of theirs.
func (s *Scaler) shareLoad(svcs []scaledService, load map[string]int) {
	h := s.fleet.Load()
	if h == nil || !h.f.Shared() {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.sample)
	defer cancel()
	now := s.now()
	tasks := s.index.activities(s.cat.Sleepers(nil))
	for _, sv := range svcs {
		others, op, err := h.f.ShareLoad(ctx, serviceLease(sv.id), load[sv.id], h.published, s.sample, now)
		if err != nil {
			h.fail(op, err)
		} else {
			h.health.Works(h.log)
		}
		if op == "read" {
			continue // this Caddy's own load, as without a fleet
		}
		load[sv.id] += others
		acts := tasks[sv.id]
		for _, a := range acts {
			a.SetFleetLoad((others + len(acts) - 1) / len(acts))
		}
	}
}

func (h *fleetHook) fail(op string, err error) {
	if h.failed != nil {
		h.failed(op)
	}
	h.health.Failed(h.log, "the fleet's storage cannot be used: the services' load is this Caddy's own until it can", err)
}

// activities are the Activities of the tasks of each scaled service (the
// service's own entry, its group, aside).
func (x *scaleIndex) activities(sleepers []catalog.Sleeper) map[string][]*catalog.Activity {
	out := map[string][]*catalog.Activity{}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, sl := range sleepers {
		id := x.byName[sl.Name]
		if s := x.services[id]; s != nil && s.scaled() && sl.Activity != nil && sl.Name != s.name { // a task, not the service
			out[id] = append(out[id], sl.Activity)
		}
	}
	return out
}
