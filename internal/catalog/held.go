package catalog

import "iter"

// Holding calls held with each of ids and whether the catalog holds an
// instance of that ID, in one pass under the writers' lock (requests never
// take it): the fleet's switches drop the weights of instances a synced
// catalog no longer holds (R4e). held must not call the catalog.
func (c *Catalog) Holding(ids iter.Seq[string], held func(id string, ok bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range ids {
		_, ok := c.byID[id]
		held(id, ok)
	}
}
