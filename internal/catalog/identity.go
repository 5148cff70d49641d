package catalog

// Find returns the instance named name among the candidates of route for
// host (from NormalizeHost) in s, the snapshot a request's targets came
// from: who a request went to (R13a), read only when asked. It scans the
// candidates once; the Instance shares its maps with the catalog, which
// never changes them: do not either.
func (s *Snapshot) Find(route Route, host, name string) (Instance, bool) {
	list, _ := s.candidates(route, host, false)
	for _, e := range list {
		if e.inst.Name == name {
			return e.inst, true
		}
	}
	if route.View == nil {
		if list, ok := s.hosts.Get(host); ok {
			for _, e := range list {
				if e.inst.Name == name {
					return e.inst, true
				}
			}
		}
		for _, e := range s.byWildcard(host) {
			if e.inst.Name == name {
				return e.inst, true
			}
		}
	}
	return Instance{}, false
}

// Names adds the name of every instance the catalog holds to dst: what a
// metrics scrape keeps series for (R13b). It holds the writers' lock for
// one pass over the instances; requests never take it.
func (c *Catalog) Names(dst map[string]struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byID {
		dst[e.inst.Name] = struct{}{}
	}
}
