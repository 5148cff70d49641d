package catalog

// Sink receives what a daemon adapter learns. The Catalog implements it; an
// adapter calls Replace, Put and Delete from one goroutine at a time, and
// may call Stopping and Started from another (its event stream's).
type Sink interface {
	// Replace sets the full list of instances after a (re-)listing: every
	// instance not in the list leaves the catalog (R6).
	Replace(instances []Instance)
	// Put adds an instance or replaces the one with the same ID.
	Put(inst Instance)
	// Delete removes the instance with this ID, if known.
	Delete(id string)
	// Stopping takes the instance out of its rotations at once: an event
	// says it is stopping. Until Started, a Put that shows it no longer
	// running, or a Replace, it stays out even if a Put still says it runs
	// (an app draining on SIGTERM runs on for a while).
	Stopping(id string)
	// Started ends a Stopping: the instance (re)started, and the next Put
	// says how it is now.
	Started(id string)
}

// StoppingBecause is a Sink that can be told why an instance is stopping
// (what the event said: "exited with code 1", "killed with SIGKILL"), for
// the log line of its leave (R6b); the Catalog is one. An adapter's
// session calls it in place of Stopping when it knows why.
type StoppingBecause interface {
	StoppingBecause(id, why string)
}
