package docker

import (
	"sync"
)

// follows says whether a container whose own labels are labels is seen by
// this connection (R2g): its follow selector matches them. The selector's
// cost is its own (a map lookup and a bounded comparison a requirement),
// whatever a tenant puts in the labels.
func (c *conn) follows(labels map[string]string) bool {
	return c.follow.Empty() || c.follow.Matches(labels)
}

// unfollowed is the set of containers a session found not to match its
// follow selector (R2g), by ID: the stream drops their events, so such a
// container costs one decision (in the listing, or one inspection if it
// is created during the session), never an inspection per event. The
// session's goroutine writes it, the stream's reads it. It holds at most
// the Engine's containers: an entry goes with the container's destroy
// event, and each listing (every Resync) replaces the whole set. The zero
// value is an empty set.
type unfollowed struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// skip says whether an event about id is to be dropped; a destroy
// forgets id (and is dropped as well).
func (u *unfollowed) skip(id string, deleted bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.ids[id]
	if ok && deleted {
		delete(u.ids, id)
	}
	return ok
}

func (u *unfollowed) add(id string) {
	u.mu.Lock()
	if u.ids == nil {
		u.ids = map[string]struct{}{}
	}
	u.ids[id] = struct{}{}
	u.mu.Unlock()
}

// replace makes ids (nil: none) the whole set: a listing's.
func (u *unfollowed) replace(ids map[string]struct{}) {
	u.mu.Lock()
	u.ids = ids
	u.mu.Unlock()
}
