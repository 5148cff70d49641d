package swarm

import (
	"sync"

	"github.com/docker/docker/api/types/swarm"
)

// follows says whether a service is seen by this connection (R2g): its
// own labels (deploy.labels) match the follow selector. The selector's
// cost is its own, whatever a tenant puts in the labels.
func (c *conn) follows(s swarm.Service) bool {
	return c.follow.Empty() || c.follow.Matches(s.Spec.Labels)
}

// unfollowed is the set of services a session found not to match its
// follow selector (R2g), by ID. The session's goroutine writes it, the
// stream's reads it. It holds at most the swarm's services: each listing
// replaces it, and a re-listing of a service sets or clears its entry.
// The zero value is an empty set.
type unfollowed struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (u *unfollowed) has(id string) bool {
	if id == "" {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.ids[id]
	return ok
}

func (u *unfollowed) set(id string, on bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if on {
		if u.ids == nil {
			u.ids = map[string]struct{}{}
		}
		u.ids[id] = struct{}{}
	} else {
		delete(u.ids, id)
	}
}

func (u *unfollowed) replace(ids map[string]struct{}) {
	u.mu.Lock()
	u.ids = ids
	u.mu.Unlock()
}
