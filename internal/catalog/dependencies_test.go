package catalog_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// depNames renders deps as names, a cycle marked with "!".
func depNames(deps []catalog.Dependency) []string {
	var out []string
	for _, d := range deps {
		if d.Cycle {
			out = append(out, d.Name+"!")
		} else {
			out = append(out, d.Name)
		}
	}
	return out
}

// R5k: DependenciesOf gives the matches in scope, in name order, and marks
// those that depend back on the instance, through a chain or directly; an
// instance depending on one of a cycle without being in it is none.
func TestDependenciesOf_R5k_scope_order_and_cycles(t *testing.T) {
	c := catalog.New(catalog.Options{})
	p := func(name string, kv ...string) catalog.Instance {
		return inst(name, label(append([]string{catalog.LabelComposeProject, "p", "name", name}, kv...)...))
	}
	c.Replace([]catalog.Instance{
		p("a", catalog.LabelDependsOn, "name in (c,b)"),
		p("b", catalog.LabelDependsOn, "name=d"),
		p("c"),
		p("d", catalog.LabelDependsOn, "name=a"),
		p("e", catalog.LabelDependsOn, "name=a"),
		inst("a2", label("name", "b", catalog.LabelComposeProject, "q")), // another project
	})
	for _, tc := range []struct {
		id   string
		want string
	}{
		{"id-a", "[b! c]"},
		{"id-b", "[d!]"},
		{"id-d", "[a!]"},
		{"id-e", "[a]"},
		{"id-c", "[]"},
	} {
		deps, matched := c.DependenciesOf(tc.id)
		if got := fmt.Sprint(depNames(deps)); got != tc.want || matched != len(deps) {
			t.Errorf("%s: dependencies %s (%d matched), want %s", tc.id, got, matched, tc.want)
		}
		var want []string
		for _, d := range deps {
			want = append(want, d.ID)
		}
		if ids := c.DependencyIDs(nil, tc.id); !slices.Equal(ids, want) {
			t.Errorf("%s: DependencyIDs %v, want those of DependenciesOf %v (R5k: one keeps up what the other wakes)", tc.id, ids, want)
		}
	}
}

// R5k: the dependency check of one wake, over two shapes of n instances
// of one project: "all", each depending on all the others; "layers",
// layers of 20, each instance depending on the whole next layer (no
// cycle, every path walked). The base commit's check (DependenciesOf,
// then a walk per dependency looking for a cycle) ran over the same
// shapes for docs/benchmarks.md.
func BenchmarkR5k_dependency_check(b *testing.B) {
	for _, shape := range []string{"all", "layers"} {
		for _, n := range []int{100, 200, 400} {
			b.Run(fmt.Sprintf("%s/%d", shape, n), func(b *testing.B) {
				c := catalog.New(catalog.Options{})
				c.Replace(depShape(shape, n))
				b.ReportAllocs()
				for b.Loop() {
					if deps, _ := c.DependenciesOf("id-i000"); len(deps) == 0 {
						b.Fatal("no dependencies")
					}
				}
			})
		}
	}
}

func depShape(shape string, n int) []catalog.Instance {
	var all []catalog.Instance
	for i := range n {
		kv := []string{catalog.LabelComposeProject, "p", catalog.LabelStandbyAfter, "1h"}
		if shape == "all" {
			kv = append(kv, "tier", "t", catalog.LabelDependsOn, "tier=t")
		} else {
			kv = append(kv, "layer", fmt.Sprint(i/20), catalog.LabelDependsOn, fmt.Sprint("layer=", i/20+1))
		}
		all = append(all, inst(fmt.Sprintf("i%03d", i), label(kv...)))
	}
	return all
}
