package catalog_test

import (
	"slices"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// probed is a catalog with a Probe that records its requests.
func probed(t *testing.T) (*catalog.Catalog, *[]catalog.ProbeRequest) {
	t.Helper()
	var reqs []catalog.ProbeRequest
	logger, _ := observed()
	c := catalog.New(catalog.Options{Logger: logger, Probe: func(r catalog.ProbeRequest) { reqs = append(reqs, r) }})
	return c, &reqs
}

// TestReadiness_R1a: a running instance without a health check joins its
// rotations once its port accepts (MarkReady), not when it starts; each
// way of building the catalog behaves alike.
func TestReadiness_R1a(t *testing.T) {
	for _, build := range []string{"put", "replace"} {
		t.Run(build, func(t *testing.T) {
			c, reqs := probed(t)
			c.AddRoutePort(8080)
			v := watch(c, "app=web")
			write := func(i catalog.Instance) {
				if build == "put" {
					c.Put(i)
				} else {
					c.Replace([]catalog.Instance{i})
				}
			}
			web := func(opts ...opt) catalog.Instance {
				return inst("web-1", append([]opt{label("app", "web")}, opts...)...)
			}

			write(web())
			mustEqual(t, "before the port accepts", request(c, v, 8080, "x"), nil)
			if len(*reqs) != 1 || !slices.Equal((*reqs)[0].Dials, []string{"10.0.0.2:8080"}) || (*reqs)[0].ID != "id-web-1" {
				t.Fatalf("probe requests %+v, want one for 10.0.0.2:8080", *reqs)
			}
			first := (*reqs)[0]
			c.MarkReady(first.ID, first.Gen, true)
			mustEqual(t, "once it accepts", request(c, v, 8080, "x"), []string{"web-1 10.0.0.2:8080"})

			// Still running at the same place: no new probe, still in.
			write(web(label("version", "2")))
			mustEqual(t, "relabelled", request(c, v, 8080, "x"), []string{"web-1 10.0.0.2:8080"})
			// Restarted: out until probed again; an answer to the old
			// probe does not count.
			write(web(state(catalog.StateStopped)))
			write(web())
			mustEqual(t, "restarted", request(c, v, 8080, "x"), nil)
			if len(*reqs) != 2 {
				t.Fatalf("%d probe requests after a restart, want 2", len(*reqs))
			}
			c.MarkReady(first.ID, first.Gen, true)
			mustEqual(t, "stale answer", request(c, v, 8080, "x"), nil)
			c.MarkReady((*reqs)[1].ID, (*reqs)[1].Gen, false) // gave up: joins anyway
			mustEqual(t, "after giving up", request(c, v, 8080, "x"), []string{"web-1 10.0.0.2:8080"})
			// A new address is probed again.
			write(web(addr("10.0.0.9")))
			mustEqual(t, "moved", request(c, v, 8080, "x"), nil)
			if len(*reqs) != 3 || (*reqs)[2].Dials[0] != "10.0.0.9:8080" {
				t.Fatalf("probe requests %+v, want a third for 10.0.0.9:8080", *reqs)
			}
		})
	}
}

// Instances with a health check use it, not the probe; caddy.port and a
// published port are probed where requests go (R3, R4).
func TestReadiness_R1a_what_is_probed(t *testing.T) {
	c, reqs := probed(t)
	c.AddRoutePort(8080)
	c.AddRoutePort(9090)
	watch(c, "app=web")
	web := label("app", "web")
	c.Put(inst("checked", web, health(catalog.HealthHealthy)))
	if len(*reqs) != 0 {
		t.Fatalf("an instance with a health check was probed: %+v", *reqs)
	}
	c.Put(inst("labelled", port("7070")))
	c.Put(inst("published", web, publish("", 32000, 8080), gateway("10.0.0.1")))
	c.Put(inst("bare", web))
	c.Put(inst("bad-port", port("x")))
	want := map[string][]string{
		"labelled":  {"10.0.0.2:7070"},
		"published": {"10.0.0.1:32000", "10.0.0.2:9090"},
		"bare":      {"10.0.0.2:8080", "10.0.0.2:9090"},
	}
	if len(*reqs) != len(want) {
		t.Fatalf("probe requests %+v, want %d", *reqs, len(want))
	}
	for _, r := range *reqs {
		if !slices.Equal(r.Dials, want[r.Name]) {
			t.Errorf("%s probed at %q, want %q", r.Name, r.Dials, want[r.Name])
		}
	}
	c.RemoveRoutePort(9090)
	c.Put(inst("bare2", web))
	if got := (*reqs)[len(*reqs)-1]; !slices.Equal(got.Dials, []string{"10.0.0.2:8080"}) {
		t.Errorf("after its route went, 9090 is still probed: %q", got.Dials)
	}
}

// A wakeable instance just woken and not yet accepting stays the fallback
// (R5), so a second one is not woken meanwhile.
func TestReadiness_R5_woken_instance_stays_the_fallback(t *testing.T) {
	c, reqs := probed(t)
	v := watch(c, "app=sleepy")
	opts := []opt{label("app", "sleepy"), publish("", 32000, 8080), gateway("10.0.0.1")}
	c.Put(inst("sb-a", append(opts, standby())...))
	c.Put(inst("sb-b", append(opts, standby())...))
	c.Put(inst("sb-a", append(opts, wake())...)) // woken: running, not yet accepting
	if len(*reqs) != 1 {
		t.Fatalf("probe requests %+v, want one", *reqs)
	}
	got := unspelt(request(c, v, 8080, "x"))
	mustEqual(t, "while sb-a is not yet accepting", got, []string{"sb-a 10.0.0.1:32000"})
}

// An instance admitted at a first listing that had nothing to probe (no
// route port known yet) keeps its place when a re-listing finds it running
// where it was, though the routes' ports are known by then: a daemon
// restart must not take every instance out at once.
func TestReadiness_R1a_relisting_keeps_verdicts(t *testing.T) {
	c, reqs := probed(t)
	v := watch(c, "app=web")
	web := inst("web-1", label("app", "web"))
	c.Replace([]catalog.Instance{web})
	c.AddRoutePort(8080)
	mustEqual(t, "first listing", request(c, v, 8080, "x"), []string{"web-1 10.0.0.2:8080"})
	c.Replace([]catalog.Instance{web})
	mustEqual(t, "re-listed", request(c, v, 8080, "x"), []string{"web-1 10.0.0.2:8080"})
	if len(*reqs) != 0 {
		t.Fatalf("probe requests %+v, want none", *reqs)
	}
	c.Replace([]catalog.Instance{inst("web-1", label("app", "web"), addr("10.0.0.7"))})
	if len(*reqs) != 1 {
		t.Fatalf("a re-listing that moved the instance sent %d probes, want 1", len(*reqs))
	}
}

// R1b: only instances a route or the permission could use are probed (a
// caddy.* label, or a watched selector matches): an unrelated container
// (a database) gets no connection, and no warning. A route watched later,
// or a label given later, makes it relevant: it is probed then, and held
// out of the new route's rotation until its port accepts.
func TestReadiness_R1b_only_relevant_instances_are_probed(t *testing.T) {
	for _, build := range []string{"put", "replace"} {
		t.Run(build, func(t *testing.T) {
			c, reqs := probed(t)
			c.AddRoutePort(8080)
			watch(c, "app=web")
			db := inst("db", label("role", "db"))
			cache := inst("cache", label("role", "cache"), addr("10.0.0.3"))
			web := inst("web", label("app", "web"), addr("10.0.0.4"))
			if build == "put" {
				c.Put(db)
				c.Put(cache)
				c.Put(web)
			} else {
				c.Replace([]catalog.Instance{db, cache, web})
			}
			names := func() []string {
				var out []string
				for _, r := range *reqs {
					out = append(out, r.Name)
				}
				return out
			}
			mustEqual(t, "probed at first", names(), []string{"web"})

			// A route watching the database makes it relevant: probed now,
			// out of that route until it accepts.
			v := watch(c, "role=db")
			mustEqual(t, "probed after a route watches db", names(), []string{"web", "db"})
			mustEqual(t, "db before its verdict", request(c, v, 8080, "x"), nil)
			r := (*reqs)[1]
			if !slices.Equal(r.Dials, []string{"10.0.0.2:8080"}) {
				t.Fatalf("db probed at %q, want 10.0.0.2:8080", r.Dials)
			}
			c.MarkReady(r.ID, r.Gen, true)
			mustEqual(t, "db once it accepts", request(c, v, 8080, "x"), []string{"db 10.0.0.2:8080"})
			// Watched again (a second route with the same selector): no new probe.
			watch(c, "role=db")
			mustEqual(t, "a second watch", names(), []string{"web", "db"})

			// A caddy.* label given to the cache where it runs makes it
			// relevant: probed then.
			relabelled := inst("cache", label("role", "cache"), host("cache.example.com"), addr("10.0.0.3"))
			if build == "put" {
				c.Put(relabelled)
			} else {
				c.Replace([]catalog.Instance{db, relabelled, web})
			}
			mustEqual(t, "probed once labelled", names(), []string{"web", "db", "cache"})
			if got := (*reqs)[2].Dials; !slices.Equal(got, []string{"10.0.0.3:8080"}) {
				t.Fatalf("cache probed at %q, want 10.0.0.3:8080", got)
			}
		})
	}
}
