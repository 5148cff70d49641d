package catalog

// Sink receives what a daemon adapter learns. The Catalog implements it; an
// adapter calls it from one goroutine at a time.
type Sink interface {
	// Replace sets the full list of instances after a (re-)listing: every
	// instance not in the list leaves the catalog (R6).
	Replace(instances []Instance)
	// Put adds an instance or replaces the one with the same ID.
	Put(inst Instance)
	// Delete removes the instance with this ID, if known.
	Delete(id string)
}
