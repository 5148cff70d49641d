package standby

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// project labels an instance of Compose project p, with more labels.
func project(p string, kv ...string) map[string]string {
	l := map[string]string{catalog.LabelComposeProject: p}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// starts are the instances started: the dependencies (their calls run
// side by side, so sorted by name), then the last one started.
func (p *poolCase) starts() []string {
	var got []string
	for _, c := range p.callList() {
		if id, ok := strings.CutPrefix(c, "start id-"); ok {
			got = append(got, id)
		}
	}
	if len(got) > 1 {
		slices.Sort(got[:len(got)-1])
	}
	return got
}

// R5k, R5d: the dependencies of one wake count under max_wakes: a label
// matching six sleepers with max_wakes 2 never has more than 2 starts in
// flight, and wakes them all before the instance itself.
func TestStandby_R5k_dependencies_count_under_max_wakes(t *testing.T) {
	insts := []catalog.Instance{member("app", catalog.StateStopped, project("p",
		catalog.LabelHost, "h", catalog.LabelStandbyAfter, "1h", catalog.LabelDependsOn, "role=db"))}
	var want []string
	for i := range 6 {
		name := fmt.Sprintf("db%d", i)
		want = append(want, name)
		insts = append(insts, member(name, catalog.StateStopped, project("p", "role", "db", catalog.LabelStandbyAfter, "1h")))
	}
	want = append(want, "app")
	p := newPoolCaseWith(t, Options{MaxWakes: 2}, catalog.Options{}, insts...)
	ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 10*time.Second, nil)
	if len(ts) != 1 || ts[0].Instance != "app" {
		t.Fatalf("targets %v, want app", ts)
	}
	if got := p.starts(); !slices.Equal(got, want) {
		t.Fatalf("starts %v, want %v", got, want)
	}
	p.mu.Lock()
	most := p.mostStarting
	p.mu.Unlock()
	if most > 2 {
		t.Errorf("%d starts in flight at once, want at most max_wakes (2)", most)
	}
	if n := p.started(CauseDependency); n != 6 {
		t.Errorf("%d dependency wakes, want 6", n)
	}
}

// R5k: a dependency is an instance of the dependent's own Compose project
// (or Swarm stack) by default: another project's matching container is
// neither woken for it nor kept up by it; instances with neither label
// reach only each other. DependsOnAnyScope widens it to the daemon.
func TestStandby_R5k_scope_is_the_project(t *testing.T) {
	insts := func() []catalog.Instance {
		return []catalog.Instance{
			member("app", catalog.StateStopped, project("mine",
				catalog.LabelHost, "h", catalog.LabelStandbyAfter, "1h", catalog.LabelDependsOn, "role=db")),
			member("db-mine", catalog.StateStopped, project("mine", "role", "db", catalog.LabelStandbyAfter, "1h")),
			member("db-theirs", catalog.StateStopped, project("theirs", "role", "db", catalog.LabelHost, "theirs",
				catalog.LabelStandbyAfter, "300ms")),
			member("db-plain", catalog.StateStopped, map[string]string{"role": "db", catalog.LabelStandbyAfter: "1h"}),
			member("stack-db", catalog.StateStopped, map[string]string{catalog.LabelStackNamespace: "mine", "role": "db",
				catalog.LabelStandbyAfter: "1h"}),
		}
	}
	t.Run("project", func(t *testing.T) {
		p := newPoolCase(t, insts()...)
		if ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil); len(ts) != 1 {
			t.Fatalf("targets %v, want app", ts)
		}
		if got := p.starts(); !slices.Equal(got, []string{"db-mine", "app"}) {
			t.Fatalf("starts %v, want db-mine then app only", got)
		}
		// The other tenant's db, woken by its own request, goes on standby
		// after its standby_after while app runs.
		if ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "theirs", 5*time.Second, nil); len(ts) != 1 {
			t.Fatalf("targets %v, want db-theirs", ts)
		}
		testkit.Eventually(t, 5*time.Second, "db-theirs on standby while app runs", func() bool {
			return slices.Contains(p.callList(), "stop id-db-theirs")
		})
	})
	t.Run("any", func(t *testing.T) {
		p := newPoolCaseWith(t, Options{}, catalog.Options{DependsOnAnyScope: true}, insts()...)
		if ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil); len(ts) != 1 {
			t.Fatalf("targets %v, want app", ts)
		}
		if got := p.starts(); !slices.Equal(got, []string{"db-mine", "db-plain", "db-theirs", "stack-db", "app"}) {
			t.Fatalf("starts %v, want every db in name order, then app", got)
		}
	})
	t.Run("neither label", func(t *testing.T) {
		in := insts()
		in[0] = member("app", catalog.StateStopped, map[string]string{
			catalog.LabelHost: "h", catalog.LabelStandbyAfter: "1h", catalog.LabelDependsOn: "role=db"})
		p := newPoolCase(t, in...)
		if ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil); len(ts) != 1 {
			t.Fatalf("targets %v, want app", ts)
		}
		if got := p.starts(); !slices.Equal(got, []string{"db-plain", "app"}) {
			t.Fatalf("starts %v, want db-plain then app", got)
		}
	})
}

// R5k: one caddy.depends_on wakes at most catalog.MaxDependencies
// instances, the first by name, and one warning says it matched more.
func TestStandby_R5k_a_label_wakes_a_bounded_number(t *testing.T) {
	insts := []catalog.Instance{member("app", catalog.StateStopped, project("p",
		catalog.LabelHost, "h", catalog.LabelStandbyAfter, "1h", catalog.LabelDependsOn, "role=db"))}
	var want []string
	for i := range catalog.MaxDependencies + 5 {
		name := fmt.Sprintf("db%02d", i)
		if i < catalog.MaxDependencies {
			want = append(want, name)
		}
		insts = append(insts, member(name, catalog.StateStopped, project("p", "role", "db", catalog.LabelStandbyAfter, "1h")))
	}
	want = append(want, "app")
	p := newPoolCaseWith(t, Options{MaxWakes: 32}, catalog.Options{}, insts...)
	for range 2 {
		if ts, _ := p.w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 10*time.Second, nil); len(ts) != 1 {
			t.Fatalf("targets %v, want app", ts)
		}
	}
	if got := p.starts(); !slices.Equal(got, want) {
		t.Fatalf("starts %v, want the first %d dbs by name, then app", got, catalog.MaxDependencies)
	}
	warned := p.logs.FilterMessageSnippet("matches more instances").All()
	if len(warned) != 1 || warned[0].ContextMap()["matched"] != int64(catalog.MaxDependencies+5) {
		t.Fatalf("warnings %v, want one saying it matched %d", warned, catalog.MaxDependencies+5)
	}
}

// R5k: a label keeps up no more than it wakes. A tenant's instance up
// whose caddy.depends_on matches another tenant's 46 idle containers, in
// their Compose project (its label copied) or with neither label on any,
// keeps up only the first catalog.MaxDependencies by name, those a wake
// of it would wake; the other 30 go on standby after their standby_after.
func TestStandby_R5k_keeps_up_no_more_than_it_wakes(t *testing.T) {
	const theirs = catalog.MaxDependencies + 30
	for _, tc := range []struct {
		name   string
		labels func(kv ...string) map[string]string
	}{
		{"copied project", func(kv ...string) map[string]string { return project("theirs", kv...) }},
		{"neither label", func(kv ...string) map[string]string {
			l := project("none", kv...)
			delete(l, catalog.LabelComposeProject)
			return l
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			insts := []catalog.Instance{member("app", catalog.StateRunning, tc.labels(catalog.LabelDependsOn, "role=db"))}
			var slept []string
			for i := range theirs {
				name := fmt.Sprintf("db%02d", i)
				if i >= catalog.MaxDependencies {
					slept = append(slept, "stop id-"+name)
				}
				insts = append(insts, member(name, catalog.StateRunning, tc.labels("role", "db",
					catalog.LabelHost, name, catalog.LabelStandbyAfter, "300ms")))
			}
			p := newPoolCase(t, insts...)
			snap := p.cat.Snapshot()
			for i := range theirs {
				ts := snap.Targets(nil, catalog.Route{Port: 8080}, fmt.Sprintf("db%02d", i))
				if len(ts) != 1 {
					t.Fatalf("db%02d: targets %v, want itself", i, ts)
				}
				p.w.Routed(ts[0].Activity, ts[0].Dial) // served once, then idle
			}
			stops := func() []string {
				var got []string
				for _, c := range p.callList() {
					if strings.HasPrefix(c, "stop ") {
						got = append(got, c)
					}
				}
				slices.Sort(got)
				return got
			}
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("the last %d of their containers on standby", len(slept)), func() bool {
				return len(stops()) >= len(slept)
			})
			if got := stops(); !slices.Equal(got, slept) {
				t.Fatalf("stops %v, want those of the %d past the first %d by name, which app keeps up",
					got, len(slept), catalog.MaxDependencies)
			}
		})
	}
}
