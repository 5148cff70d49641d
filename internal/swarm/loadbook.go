package swarm

import "sync"

// LoadBook is the load on the scaled services of one swarm that every
// Scaler of one Caddy following it writes and reads (R5j). Routes whose
// connection settings differ (one reading caddy-docker-proxy's labels,
// one with a readiness_timeout of its own) follow one swarm through
// connections, catalogs and Scalers of their own; a request is counted in
// the catalog of the route it went through only. Without the book, the
// Scaler of a route that sends a service no request saw its load as 0,
// and took away the replica the other had just added under load.
//
// Each Scaler writes its own load each sample and adds the others' last
// written: at most a sample old. A Scaler that closes takes its entry
// out. Bounded by the Scalers of the process (one per connection), each
// entry by the services they scale. Share one per swarm manager
// (Adapter.EngineKey) through the connection pool; the zero LoadBook is
// not usable: make one with NewLoadBook.
type LoadBook struct {
	mu    sync.Mutex
	loads map[*Scaler]map[string]int // by Scaler: its own load by service ID
}

// NewLoadBook returns an empty LoadBook.
func NewLoadBook() *LoadBook { return &LoadBook{loads: map[*Scaler]map[string]int{}} }

// Destruct empties the book (caddy.Destructor: it lives in the connection
// pool).
func (b *LoadBook) Destruct() error {
	b.mu.Lock()
	clear(b.loads)
	b.mu.Unlock()
	return nil
}

// share records own, s's load by service ID, and adds to it what the
// other Scalers last recorded for the same services.
func (b *LoadBook) share(s *Scaler, own map[string]int) {
	mine := make(map[string]int, len(own))
	for id, n := range own {
		if n > 0 {
			mine[id] = n
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loads[s] = mine
	for other, loads := range b.loads {
		if other == s {
			continue
		}
		for id, n := range loads {
			own[id] += n
		}
	}
}

// leave takes s's entry out.
func (b *LoadBook) leave(s *Scaler) {
	b.mu.Lock()
	delete(b.loads, s)
	b.mu.Unlock()
}
