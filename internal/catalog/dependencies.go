package catalog

import (
	"slices"
	"strings"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Dependencies woken first (R5k): which instances a caddy.depends_on may
// reach, how many, and the graph a wake follows, computed once per wake
// over one view of the catalog.

const (
	// LabelComposeProject is the label Docker Compose puts on every
	// container of a project; LabelStackNamespace the one `docker stack
	// deploy` puts on a stack's services and tasks. Together they are a
	// dependency's scope (R5k).
	LabelComposeProject = "com.docker.compose.project"
	LabelStackNamespace = "com.docker.stack.namespace"

	// MaxDependencies bounds how many instances one caddy.depends_on makes
	// dependencies: the first 16, by name, of those it matches in scope.
	MaxDependencies = 16
	// MaxDependencyDepth bounds how far a chain of caddy.depends_on is
	// followed, woken or searched for a cycle.
	MaxDependencyDepth = 8
)

// scope is an instance's scope (R5k): its Compose project, else its Swarm
// stack (stack set), else none (the zero scope: the instances with
// neither label form one scope of their own). Comparing two costs no
// allocation.
type scope struct {
	stack bool
	name  string
}

// scopeOf is the scope of an instance with these labels.
func scopeOf(labels map[string]string) scope {
	if p := labels[LabelComposeProject]; p != "" {
		return scope{name: p}
	}
	if s := labels[LabelStackNamespace]; s != "" {
		return scope{stack: true, name: s}
	}
	return scope{}
}

// Dependent is an instance labelled caddy.depends_on, as the sleeper feed
// reports it.
type Dependent struct {
	ID, Name  string
	State     State
	DependsOn *selector.Selector
	// scope is the instance's scope; anyScope is the catalog's
	// Options.DependsOnAnyScope.
	scope    scope
	anyScope bool
}

// dependent is e as a Dependent, nil without a valid caddy.depends_on.
func (c *Catalog) dependent(e *entry) *Dependent {
	if e.pool.dependsOn == nil {
		return nil
	}
	return &Dependent{ID: e.inst.ID, Name: e.inst.Name, State: e.inst.State, DependsOn: e.pool.dependsOn,
		scope: scopeOf(e.inst.Labels), anyScope: c.depAny}
}

// Covers reports whether d's caddy.depends_on may reach s: s is another
// instance, in d's scope, that the selector matches. It is the cheap first
// test only: s is one of d's dependencies when it is also among the first
// MaxDependencies of its matches, as Catalog.DependencyIDs says.
func (d Dependent) Covers(s Sleeper) bool {
	return d.ID != s.ID && (d.anyScope || d.scope == scopeOf(s.Labels)) && d.DependsOn.Matches(s.Labels)
}

// Dependency is an instance that another's caddy.depends_on matches.
type Dependency struct {
	ID, Name string
	Labels   map[string]string
	State    State
	// Wakeable: Caddy may wake it (a valid caddy.standby_after).
	Wakeable bool
	// Ready: running and accepting connections, as Sleeper.Ready.
	Ready    bool
	Activity *Activity
	// Cycle: it depends back, through caddy.depends_on, on the instance
	// whose dependency it is, in at most MaxDependencyDepth links.
	Cycle bool
}

// DependenciesOf returns the instances that the caddy.depends_on of the
// instance id makes its dependencies (R5k): those the selector matches, in
// its scope (the same Compose project or Swarm stack, unless the catalog's
// Options.DependsOnAnyScope), itself and groups excepted, in name order, at
// most MaxDependencies; and how many it matched in all. None when it has
// no valid label or is unknown.
//
// The catalog's lock is held only to list the instances in scope; the
// graph is then walked once, each instance's matches computed once, and
// the cycles found with one walk back from the instance: the cost is the
// instances reached times those in scope, never per pair of them.
func (c *Catalog) DependenciesOf(id string) (deps []Dependency, matched int) {
	root, pool := c.dependencyScope(id)
	if root == nil {
		return nil, 0
	}
	g := dependencyGraph{pool: pool, edges: map[*entry][]*entry{}}
	first, matched := g.matches(root)
	g.walk(root)
	back := g.reaching(root)
	deps = make([]Dependency, 0, len(first))
	for _, d := range first {
		deps = append(deps, Dependency{
			ID: d.inst.ID, Name: d.inst.Name, Labels: d.inst.Labels, State: d.inst.State,
			Wakeable: d.wakeable(), Ready: d.ready(), Activity: d.activity, Cycle: back[d],
		})
	}
	return deps, matched
}

// DependencyIDs appends to dst the IDs of the instances that the
// caddy.depends_on of the instance id makes its dependencies: the same
// ones, in the same order, as DependenciesOf, without following their own
// labels. While the instance is up, these and only these stay up (R5k): a
// label keeps up no more, and no other scope, than it wakes.
func (c *Catalog) DependencyIDs(dst []string, id string) []string {
	root, pool := c.dependencyScope(id)
	if root == nil {
		return dst
	}
	first, _ := firstMatches(root, pool)
	for _, d := range first {
		dst = append(dst, d.inst.ID)
	}
	return dst
}

// dependencyScope returns the entry of the instance id, nil when it is
// unknown or has no valid caddy.depends_on, and the instances its label
// may reach (R5k): those of its scope (every one, with
// Options.DependsOnAnyScope), groups excepted, sorted by name. Both sides
// of R5k read it: the wake (DependenciesOf) and the standby
// (DependencyIDs).
func (c *Catalog) dependencyScope(id string) (*entry, []*entry) {
	c.mu.Lock()
	root := c.byID[id]
	if root == nil || root.pool.dependsOn == nil {
		c.mu.Unlock()
		return nil, nil
	}
	scope := scopeOf(root.inst.Labels)
	var pool []*entry
	for _, e := range c.byID {
		if !e.inst.Group && (c.depAny || scopeOf(e.inst.Labels) == scope) {
			pool = append(pool, e)
		}
	}
	c.mu.Unlock()
	// Entries are never changed once published: read outside the lock.
	slices.SortFunc(pool, func(a, b *entry) int {
		if n := strings.Compare(a.inst.Name, b.inst.Name); n != 0 {
			return n
		}
		return strings.Compare(a.inst.ID, b.inst.ID)
	})
	return root, pool
}

// dependencyGraph is the caddy.depends_on graph over the instances of one
// scope, sorted by name, its edges computed as a walk reaches them.
type dependencyGraph struct {
	pool  []*entry
	edges map[*entry][]*entry
}

// matches returns e's dependencies (firstMatches), remembering them.
func (g *dependencyGraph) matches(e *entry) ([]*entry, int) {
	if got, ok := g.edges[e]; ok || e.pool.dependsOn == nil {
		return got, len(got)
	}
	out, n := firstMatches(e, g.pool)
	g.edges[e] = out
	return out, n
}

// firstMatches returns e's dependencies among pool, the instances of its
// scope sorted by name: the first MaxDependencies its caddy.depends_on
// matches, itself excepted (R5k's cap); and how many it matches in all.
func firstMatches(e *entry, pool []*entry) ([]*entry, int) {
	var out []*entry
	n := 0
	for _, d := range pool {
		if d == e || !e.pool.dependsOn.Matches(d.inst.Labels) {
			continue
		}
		if n++; len(out) < MaxDependencies {
			out = append(out, d)
		}
	}
	return out, n
}

// walk computes the edges of every instance reachable from root in at
// most 2*MaxDependencyDepth links, breadth first.
func (g *dependencyGraph) walk(root *entry) {
	level := []*entry{root}
	seen := map[*entry]bool{root: true}
	for depth := 0; depth < 2*MaxDependencyDepth && len(level) > 0; depth++ {
		var next []*entry
		for _, e := range level {
			out, _ := g.matches(e)
			for _, d := range out {
				if !seen[d] {
					seen[d] = true
					next = append(next, d)
				}
			}
		}
		level = next
	}
}

// reaching returns the instances of the walked graph from which root is
// reached in at most MaxDependencyDepth links: one walk along the edges
// reversed.
func (g *dependencyGraph) reaching(root *entry) map[*entry]bool {
	rev := map[*entry][]*entry{}
	for from, out := range g.edges {
		for _, to := range out {
			rev[to] = append(rev[to], from)
		}
	}
	got := map[*entry]bool{}
	level := []*entry{root}
	for depth := 0; depth < MaxDependencyDepth && len(level) > 0; depth++ {
		var next []*entry
		for _, e := range level {
			for _, from := range rev[e] {
				if !got[from] {
					got[from] = true
					next = append(next, from)
				}
			}
		}
		level = next
	}
	return got
}
