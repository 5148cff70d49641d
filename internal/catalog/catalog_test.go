package catalog_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

var _ catalog.Sink = (*catalog.Catalog)(nil)

func TestPutAddsAndUpdatesByID(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-1", label("app", "web"), host("shop.example.com"), addr("10.0.0.1")))
	mustEqual(t, "added", request(c, v, 8080, "shop.example.com"), []string{"web-1 10.0.0.1:8080"})

	// Same ID: the instance is replaced, not added, whatever else changed.
	c.Put(inst("web-renamed", id("id-web-1"), label("app", "web"), host("blog.example.com"), addr("10.0.0.9")))
	mustEqual(t, "view after update", request(c, v, 8080, "blog.example.com"), []string{"web-renamed 10.0.0.9:8080"})
	mustEqual(t, "host route, new host", request(c, nil, 8080, "blog.example.com"), []string{"web-renamed 10.0.0.9:8080"})
	mustEqual(t, "host route, old host", request(c, nil, 8080, "shop.example.com"), nil)
	if c.Snapshot().Claimed("shop.example.com") {
		t.Error("old host still claimed after the update")
	}
}

func TestDelete(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-1", label("app", "web"), host("shop.example.com"), addr("10.0.0.1")))
	c.Put(inst("web-2", label("app", "web"), host("shop.example.com"), addr("10.0.0.2")))

	c.Delete("id-web-1")
	mustEqual(t, "view", request(c, v, 8080, "shop.example.com"), []string{"web-2 10.0.0.2:8080"})
	mustEqual(t, "host route", request(c, nil, 8080, "shop.example.com"), []string{"web-2 10.0.0.2:8080"})

	c.Delete("id-unknown") // a no-op
	c.Delete("id-web-1")   // twice: a no-op
	mustEqual(t, "after no-op deletes", request(c, v, 8080, "shop.example.com"), []string{"web-2 10.0.0.2:8080"})

	c.Delete("id-web-2")
	mustEqual(t, "view, all deleted", request(c, v, 8080, "shop.example.com"), nil)
	if c.Snapshot().Claimed("shop.example.com") {
		t.Error("host claimed after every instance listing it was deleted")
	}
}

func TestReplaceRemovesInstancesMissingFromListing(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-a", label("app", "web"), host("a.example.com"), addr("10.0.0.1")))
	c.Put(inst("web-b", label("app", "web"), host("b.example.com"), addr("10.0.0.2")))
	c.Put(inst("web-c", label("app", "web"), host("c.example.com"), addr("10.0.0.3")))

	c.Replace([]catalog.Instance{
		inst("web-d", label("app", "web"), host("d.example.com"), addr("10.0.0.4")),
		inst("web-b", label("app", "web"), host("b.example.com"), addr("10.0.0.22")), // changed meanwhile
	})

	// Each instance serves only its own host, on the view as on the host route.
	mustEqual(t, "view, b", request(c, v, 8080, "b.example.com"), []string{"web-b 10.0.0.22:8080"})
	mustEqual(t, "view, d", request(c, v, 8080, "d.example.com"), []string{"web-d 10.0.0.4:8080"})
	for _, h := range []string{"a.example.com", "c.example.com"} {
		mustEqual(t, "view, "+h, request(c, v, 8080, h), nil)
		mustEqual(t, "host route, "+h, request(c, nil, 8080, h), nil)
	}
	mustEqual(t, "host route, b", request(c, nil, 8080, "b.example.com"), []string{"web-b 10.0.0.22:8080"})
	snap := c.Snapshot()
	for h, want := range map[string]bool{"a.example.com": false, "b.example.com": true, "c.example.com": false, "d.example.com": true} {
		if got := snap.Claimed(h); got != want {
			t.Errorf("Claimed(%q) = %v, want %v", h, got, want)
		}
	}
	if n := snap.Hosts(); n != 2 {
		t.Errorf("Hosts() = %d, want 2", n)
	}

	// Writes after a Replace build on it.
	c.Put(inst("web-a", label("app", "web"), addr("10.0.0.1")))
	c.Delete("id-web-d")
	mustEqual(t, "view after Put/Delete", request(c, v, 8080, "b.example.com"), []string{"web-a 10.0.0.1:8080", "web-b 10.0.0.22:8080"})
	mustEqual(t, "view after Put/Delete, d", request(c, v, 8080, "d.example.com"), []string{"web-a 10.0.0.1:8080"})

	c.Replace(nil)
	mustEqual(t, "view after empty listing", request(c, v, 8080, "x.example.com"), nil)
	if n := c.Snapshot().Hosts(); n != 0 {
		t.Errorf("Hosts() after empty listing = %d, want 0", n)
	}
}

func TestReadyClosesOnFirstReplaceOnly(t *testing.T) {
	c := catalog.New(catalog.Options{})
	isReady := func() bool {
		select {
		case <-c.Ready():
			return true
		default:
			return false
		}
	}
	if isReady() {
		t.Fatal("ready before any listing")
	}
	c.Put(inst("web-1"))
	c.Delete("id-web-1")
	if isReady() {
		t.Fatal("ready after Put/Delete: only a full listing makes the catalog ready")
	}
	c.Replace(nil) // an empty listing is a listing
	if !isReady() {
		t.Fatal("not ready after the first Replace")
	}
	c.Replace([]catalog.Instance{inst("web-1")}) // must not close twice (panic)
	if !isReady() {
		t.Fatal("not ready after a second Replace")
	}
}

func TestWatchComputesViewFromExistingInstances(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("web-b", label("app", "web"), addr("10.0.0.2")))
	c.Put(inst("api-a", label("app", "api"), addr("10.0.0.9")))
	c.Put(inst("web-a", label("app", "web"), addr("10.0.0.1")))
	c.Replace([]catalog.Instance{
		inst("web-b", label("app", "web"), addr("10.0.0.2")),
		inst("api-a", label("app", "api"), addr("10.0.0.9")),
		inst("web-a", label("app", "web"), addr("10.0.0.1")),
		inst("web-c", label("app", "web"), addr("10.0.0.3")),
	})
	c.Put(inst("web-0", label("app", "web"), addr("10.0.0.10")))

	v := watch(c, "app=web")
	mustEqual(t, "new view", request(c, v, 8080, "shop.example.com"),
		[]string{"web-0 10.0.0.10:8080", "web-a 10.0.0.1:8080", "web-b 10.0.0.2:8080", "web-c 10.0.0.3:8080"})
}

func TestWatchEqualSelectorsShareOneView(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v1 := watch(c, "app==web")
	v2 := watch(c, "app=web")
	v3 := watch(c, " app = web ")
	if v1 != v2 || v1 != v3 {
		t.Errorf("equal selectors written differently: views %p %p %p, want one", v1, v2, v3)
	}
	s1 := watch(c, "tier in (b,a,b)")
	s2 := watch(c, "tier in (a,b)")
	if s1 != s2 {
		t.Errorf("equal set selectors: views %p %p, want one", s1, s2)
	}
	if other := watch(c, "app=api"); other == v1 {
		t.Error("different selectors share a view")
	}
	if other := watch(c, "app=web,tier=edge"); other == v1 {
		t.Error("different selectors share a view")
	}
}

func TestUnwatch(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("web-1", label("app", "web"), addr("10.0.0.1")))
	v1 := watch(c, "app=web")
	v2 := watch(c, "app==web")

	// One user left: the view is still kept up to date for the other.
	c.Unwatch(v1)
	c.Put(inst("web-2", label("app", "web"), addr("10.0.0.2")))
	mustEqual(t, "after one Unwatch, Put", request(c, v2, 8080, "shop.example.com"), []string{"web-1 10.0.0.1:8080", "web-2 10.0.0.2:8080"})
	c.Replace([]catalog.Instance{inst("web-2", label("app", "web"), addr("10.0.0.2"))})
	mustEqual(t, "after one Unwatch, Replace", request(c, v2, 8080, "shop.example.com"), []string{"web-2 10.0.0.2:8080"})

	// Last user left: the view is gone; writes no longer maintain it.
	c.Unwatch(v2)
	c.Put(inst("web-3", label("app", "web"), addr("10.0.0.3")))
	mustEqual(t, "released view", request(c, v2, 8080, "shop.example.com"), nil)

	// Watching again gives a fresh view, computed from what is there now.
	v3 := watch(c, "app=web")
	mustEqual(t, "watched again", request(c, v3, 8080, "shop.example.com"), []string{"web-2 10.0.0.2:8080", "web-3 10.0.0.3:8080"})
	c.Put(inst("web-4", label("app", "web"), addr("10.0.0.4")))
	c.Replace([]catalog.Instance{inst("web-4", label("app", "web"), addr("10.0.0.4"))})
	mustEqual(t, "watched again, after writes", request(c, v3, 8080, "shop.example.com"), []string{"web-4 10.0.0.4:8080"})
}

// TestSnapshotImmutable: a Snapshot is the catalog at one moment; nothing
// written afterwards shows through it.
func TestSnapshotImmutable(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-a", label("app", "web"), host("shop.example.com"), addr("10.0.0.1")))
	c.Put(inst("web-c", label("app", "web"), host("shop.example.com"), addr("10.0.0.3")))

	type view struct {
		bySelector, byHost []string
		claimed            bool
		hosts              int
	}
	look := func(s *catalog.Snapshot) view {
		return view{
			bySelector: targets(s.Targets(nil, catalog.Route{View: v, Port: 8080}, "shop.example.com")),
			byHost:     targets(s.Targets(nil, catalog.Route{Port: 8080}, "shop.example.com")),
			claimed:    s.Claimed("shop.example.com"),
			hosts:      s.Hosts(),
		}
	}
	before := c.Snapshot()
	want := look(before)
	wantTargets := []string{"web-a 10.0.0.1:8080", "web-c 10.0.0.3:8080"}
	mustEqual(t, "before, by selector", want.bySelector, wantTargets)
	mustEqual(t, "before, by host", want.byHost, wantTargets)

	for _, w := range []struct {
		name  string
		write func()
	}{
		{"Put inserting in the middle", func() {
			c.Put(inst("web-b", label("app", "web"), host("shop.example.com"), addr("10.0.0.2")))
		}},
		{"Put changing state", func() {
			c.Put(inst("web-a", label("app", "web"), host("shop.example.com"), state(catalog.StatePaused)))
		}},
		{"Put changing host", func() { c.Put(inst("web-c", label("app", "web"), host("other.example.com"))) }},
		{"Delete", func() { c.Delete("id-web-a") }},
		{"Replace", func() { c.Replace([]catalog.Instance{inst("web-z", host("z.example.com"))}) }},
		{"Unwatch", func() { c.Unwatch(v) }},
		{"Watch", func() { watch(c, "app=api") }},
	} {
		w.write()
		got := look(before)
		mustEqual(t, "after "+w.name+", by selector", got.bySelector, want.bySelector)
		mustEqual(t, "after "+w.name+", by host", got.byHost, want.byHost)
		if got.claimed != want.claimed || got.hosts != want.hosts {
			t.Errorf("after %s: Claimed %v Hosts %d, want %v %d", w.name, got.claimed, got.hosts, want.claimed, want.hosts)
		}
	}
}

// TestSnapshotDoesNotShareTargets: the slice Targets returns is the
// caller's; changing it does not change the snapshot.
func TestSnapshotDoesNotShareTargets(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-a", label("app", "web"), addr("10.0.0.1")))
	c.Put(inst("web-b", label("app", "web"), addr("10.0.0.2")))
	snap := c.Snapshot()
	ts := snap.Targets(nil, catalog.Route{View: v, Port: 8080}, "x")
	ts[0] = catalog.Target{Instance: "mangled", Dial: "192.0.2.1:1"}
	_ = append(ts[:1], catalog.Target{Instance: "mangled", Dial: "192.0.2.1:1"})
	mustEqual(t, "after mangling a result", targets(snap.Targets(nil, catalog.Route{View: v, Port: 8080}, "x")),
		[]string{"web-a 10.0.0.1:8080", "web-b 10.0.0.2:8080"})
}

// rotationLine is one expected R6 log line.
type rotationLine struct {
	joins    bool   // joins (true) or leaves (false) the rotation
	instance string // the instance's name
	why      string // contained in the "why" field
}

func (l rotationLine) String() string {
	dir := "leaves"
	if l.joins {
		dir = "joins"
	}
	return fmt.Sprintf("%s %s why~%q", l.instance, dir, l.why)
}

func joins(name, why string) rotationLine  { return rotationLine{true, name, why} }
func leaves(name, why string) rotationLine { return rotationLine{false, name, why} }

// checkRotationLog checks the info lines logged since the last call.
func checkRotationLog(t *testing.T, step string, logs *observer.ObservedLogs, want ...rotationLine) {
	t.Helper()
	entries := logs.TakeAll()
	var got []observer.LoggedEntry
	for _, e := range entries {
		if e.Level == zapcore.InfoLevel {
			got = append(got, e)
		}
	}
	// Replace may log the instances of a listing in any order.
	slices.SortFunc(got, func(a, b observer.LoggedEntry) int {
		return strings.Compare(fmt.Sprint(a.ContextMap()["instance"]), fmt.Sprint(b.ContextMap()["instance"]))
	})
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		m := got[i].ContextMap()
		msg := strings.ToLower(got[i].Message)
		dirOK := strings.Contains(msg, "join")
		if !want[i].joins {
			dirOK = strings.Contains(msg, "leave")
		}
		why, _ := m["why"].(string)
		ok = dirOK && m["instance"] == want[i].instance && strings.Contains(why, want[i].why)
	}
	if !ok {
		t.Errorf("%s: info log:\n got  %q\n want %v", step, describe(got), want)
	}
}

// TestRotationLog is R6: each instance that joins or leaves the rotation is
// logged once, at info level, with its name and why; nothing else is. The
// instances name their port: one without gets no requests (R3).
func TestRotationLog(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	web := label("app", "web", catalog.LabelPort, "8080")

	steps := []struct {
		name  string
		write func()
		want  []rotationLine
	}{
		{"new running instance joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"same again: nothing", func() { c.Put(inst("web-1", web)) }, nil},
		{"label change, still routable: nothing", func() { c.Put(inst("web-1", web, label("tier", "edge"))) }, nil},
		{"address change, still routable: nothing", func() { c.Put(inst("web-1", web, addr("10.0.0.7"))) }, nil},
		{"rename, still routable: nothing", func() { c.Put(inst("web-one", id("id-web-1"), web)) }, nil},
		{"renamed back, still routable: nothing", func() { c.Put(inst("web-1", web)) }, nil},
		{"paused leaves", func() { c.Put(inst("web-1", web, state(catalog.StatePaused))) }, []rotationLine{leaves("web-1", "paused")}},
		{"paused again: nothing", func() { c.Put(inst("web-1", web, state(catalog.StatePaused))) }, nil},
		{"stopped, was paused: nothing", func() { c.Put(inst("web-1", web, state(catalog.StateStopped))) }, nil},
		{"healthy joins", func() { c.Put(inst("web-1", web, health(catalog.HealthHealthy))) }, []rotationLine{joins("web-1", "healthy")}},
		{"unhealthy leaves", func() { c.Put(inst("web-1", web, health(catalog.HealthUnhealthy))) }, []rotationLine{leaves("web-1", "unhealthy")}},
		{"starting, was unhealthy: nothing", func() { c.Put(inst("web-1", web, health(catalog.HealthStarting))) }, nil},
		{"healthy joins again", func() { c.Put(inst("web-1", web, health(catalog.HealthHealthy))) }, []rotationLine{joins("web-1", "healthy")}},
		{"no verdict leaves", func() { c.Put(inst("web-1", web, health(catalog.HealthStarting))) }, []rotationLine{leaves("web-1", "verdict")}},
		{"running, no check, joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"stopped leaves", func() { c.Put(inst("web-1", web, state(catalog.StateStopped))) }, []rotationLine{leaves("web-1", "stopped")}},
		{"running joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"standby leaves", func() { c.Put(inst("web-1", web, standby())) }, []rotationLine{leaves("web-1", "standby")}},
		{"running joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"failed leaves", func() { c.Put(inst("web-1", web, state(catalog.StateFailed))) }, []rotationLine{leaves("web-1", "failed")}},
		{"running joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"address lost leaves", func() { c.Put(inst("web-1", web, addr(""))) }, []rotationLine{leaves("web-1", "address")}},
		{"address back joins", func() { c.Put(inst("web-1", web)) }, []rotationLine{joins("web-1", "running")}},
		{"deleted leaves", func() { c.Delete("id-web-1") }, []rotationLine{leaves("web-1", "deleted")}},
		{"deleted again: nothing", func() { c.Delete("id-web-1") }, nil},
		{"new stopped instance: nothing", func() { c.Put(inst("web-2", web, state(catalog.StateStopped))) }, nil},
		{"delete of a stopped instance: nothing", func() { c.Delete("id-web-2") }, nil},
		{"listing: running joins, paused nothing", func() {
			c.Replace([]catalog.Instance{inst("web-3", web), inst("web-4", web, state(catalog.StatePaused)), inst("web-5", web)})
		}, []rotationLine{joins("web-3", "running"), joins("web-5", "running")}},
		{"same listing again: nothing", func() {
			c.Replace([]catalog.Instance{inst("web-3", web), inst("web-4", web, state(catalog.StatePaused)), inst("web-5", web)})
		}, nil},
		{"listing: missing and changed instances leave, resumed joins", func() {
			c.Replace([]catalog.Instance{inst("web-4", web), inst("web-5", web, state(catalog.StatePaused))})
		}, []rotationLine{leaves("web-3", ""), joins("web-4", "running"), leaves("web-5", "paused")}},
	}
	for _, s := range steps {
		s.write()
		checkRotationLog(t, s.name, logs, s.want...)
	}
}

// TestRotationLogNamesInstance: the log line of a deleted or renamed
// instance names it as it was known.
func TestRotationLogNamesInstance(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	c.Put(inst("web-1", port("8080")))
	c.Put(inst("web-renamed", id("id-web-1"), port("8080"), state(catalog.StatePaused)))
	c.Delete("id-web-1")
	// Leaving names the old instance name or the new: accept either, but the
	// line must name one of them.
	got := describe(logs.TakeAll())
	if len(got) != 2 || !strings.Contains(got[0], "instance=web-1") ||
		!(strings.Contains(got[1], "instance=web-1") || strings.Contains(got[1], "instance=web-renamed")) {
		t.Errorf("log: %q", got)
	}
}

// warnings returns the warning entries logged since the last call.
func warnings(logs *observer.ObservedLogs) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, e := range logs.TakeAll() {
		if e.Level >= zapcore.WarnLevel {
			out = append(out, e)
		}
	}
	return out
}

// names reports whether some field of the entry has this value.
func names(e observer.LoggedEntry, value string) bool {
	for _, v := range e.ContextMap() {
		if v == value {
			return true
		}
	}
	return false
}

// TestInvalidPortWarnsOnce is R3: an unparsable caddy.port is warned about
// once per value, naming the instance and the value, not per request and
// not per event about the instance.
func TestInvalidPortWarnsOnce(t *testing.T) {
	for _, bad := range []string{"0", "70000", "http"} {
		t.Run("R3_invalid_caddy_port_"+bad, func(t *testing.T) {
			logger, logs := observed()
			c := catalog.New(catalog.Options{Logger: logger})
			v := watch(c, "app=web")

			for range 3 {
				c.Put(inst("web-1", label("app", "web"), port(bad)))
			}
			c.Put(inst("web-1", label("app", "web"), port(bad), state(catalog.StatePaused)))
			c.Put(inst("web-1", label("app", "web"), port(bad)))
			c.Replace([]catalog.Instance{inst("web-1", label("app", "web"), port(bad))})
			for range 10 {
				if got := request(c, v, 8080, "shop.example.com"); got != nil {
					t.Fatalf("got %q, want no requests", got)
				}
				request(c, nil, 8080, "shop.example.com")
			}

			ws := warnings(logs)
			if len(ws) != 1 {
				t.Fatalf("got %d warnings, want 1: %q", len(ws), describe(ws))
			}
			if !names(ws[0], "web-1") || !names(ws[0], bad) {
				t.Errorf("warning %q: want it to name the instance web-1 and the value %q", describe(ws), bad)
			}
		})
	}

	t.Run("R3_new_bad_value_warns_again", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web-1", port("http")))
		c.Put(inst("web-1", port("http")))
		if ws := warnings(logs); len(ws) != 1 || !names(ws[0], "http") {
			t.Errorf("first value: %q", describe(ws))
		}
		c.Put(inst("web-1", port("70000")))
		c.Put(inst("web-1", port("70000")))
		if ws := warnings(logs); len(ws) != 1 || !names(ws[0], "70000") {
			t.Errorf("new bad value: %q, want one warning naming 70000", describe(ws))
		}
	})

	t.Run("R3_each_instance_warned_about", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Replace([]catalog.Instance{inst("web-1", port("http")), inst("web-2", port("http"))})
		c.Replace([]catalog.Instance{inst("web-1", port("http")), inst("web-2", port("http"))})
		ws := warnings(logs)
		if len(ws) != 2 {
			t.Fatalf("got %q, want one warning per instance", describe(ws))
		}
		if !(names(ws[0], "web-1") && names(ws[1], "web-2")) && !(names(ws[0], "web-2") && names(ws[1], "web-1")) {
			t.Errorf("got %q, want one warning naming each instance", describe(ws))
		}
	})

	t.Run("R3_valid_port_no_warning", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web-1", port("8080")))
		c.Put(inst("web-2"))
		if ws := warnings(logs); len(ws) != 0 {
			t.Errorf("got %q, want no warning", describe(ws))
		}
	})
}

// writeSequence is what an adapter might write: Puts that flip instances
// between states, Deletes, and now and then a full re-listing. The host
// shop.example.com is always listed by "anchor", which is never deleted.
func writeSequence(c *catalog.Catalog, writes, instances int) {
	states := []catalog.State{catalog.StateRunning, catalog.StatePaused, catalog.StateStandby, catalog.StateRunning}
	anchor := inst("anchor", host("shop.example.com"), state(catalog.StateStopped))
	c.Put(anchor)
	for i := range writes {
		n := i % instances
		name := fmt.Sprintf("web-%02d", n)
		switch {
		case i%97 == 0:
			list := []catalog.Instance{anchor}
			for k := range instances / 2 {
				list = append(list, inst(fmt.Sprintf("web-%02d", k), label("app", "web"), host("shop.example.com")))
			}
			c.Replace(list)
		case i%7 == 0:
			c.Delete("id-" + name)
		default:
			c.Put(inst(name, label("app", "web"), host("shop.example.com"), state(states[i%len(states)]),
				wake(), publish("", uint16(30000+n), 8080)))
		}
	}
}

// TestConcurrentReadersAndWriter runs requests against a writer; run it
// with -race. Readers check what every snapshot must satisfy whatever the
// writer does: targets in name order, each with a dial, the anchor's host
// claimed; at the end the catalog is what the same writes give alone.
func TestConcurrentReadersAndWriter(t *testing.T) {
	const (
		writes    = 3000
		instances = 20
		readers   = 4
	)
	opts := catalog.Options{DaemonHost: "203.0.113.7"}
	c := catalog.New(opts)
	view := watch(c, "app=web")
	c.Put(inst("anchor", host("shop.example.com"), state(catalog.StateStopped))) // before any reader

	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the adapter: one writer
		defer wg.Done()
		defer done.Store(true)
		writeSequence(c, writes, instances)
	}()
	wg.Add(1)
	go func() { // config reloads: views come and go
		defer wg.Done()
		for i := 0; i < 200 && !done.Load(); i++ {
			c.Unwatch(watch(c, fmt.Sprintf("app=web,n=%d", i%3)))
		}
	}()

	byName := func(a, b catalog.Target) int { return strings.Compare(a.Instance, b.Instance) }
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() { // requests
			defer wg.Done()
			var dst []catalog.Target
			for first := true; first || !done.Load(); first = false {
				snap := c.Snapshot()
				for _, route := range []catalog.Route{{View: view, Port: 8080}, {Port: 8080}} {
					dst = snap.Targets(dst[:0], route, "shop.example.com")
					if !slices.IsSortedFunc(dst, byName) {
						errs <- fmt.Errorf("targets not in name order: %v", dst)
						return
					}
					for _, ts := range dst {
						if ts.Dial == "" || ts.Instance == "" {
							errs <- fmt.Errorf("incomplete target %+v", ts)
							return
						}
					}
				}
				if !snap.Claimed("shop.example.com") {
					errs <- fmt.Errorf("host listed by anchor not claimed")
					return
				}
				if snap.Claimed("evil.example.com") {
					errs <- fmt.Errorf("unknown host claimed")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	alone := catalog.New(opts)
	aloneView := watch(alone, "app=web")
	writeSequence(alone, writes, instances)
	want := request(alone, aloneView, 8080, "shop.example.com")
	if want == nil {
		t.Fatal("the write sequence leaves nothing routable; the test checks nothing")
	}
	mustEqual(t, "final, by selector", request(c, view, 8080, "shop.example.com"), want)
	mustEqual(t, "final, by host", request(c, nil, 8080, "shop.example.com"), request(alone, nil, 8080, "shop.example.com"))
}

// TestIncrementalMatchesRebuild drives a catalog with a long random (seeded)
// sequence of Puts, Deletes and re-listings over many hosts, and after each
// write compares it with a catalog rebuilt from scratch by Replace from the
// same instances: every view, every host route and Claimed for every host
// must agree, for exact hosts and names only wildcards claim (R2a). It
// checks the incremental index maintenance of Put and Delete (renames, host
// changes, wildcard changes, label changes) against the full rebuild.
func TestIncrementalMatchesRebuild(t *testing.T) {
	const (
		ops       = 1500
		instances = 60
		hosts     = 150 // enough for a multi-level host index
	)
	rng := rand.New(rand.NewPCG(1, 2))
	sels := []string{"app=web", "app=api", "tier in (edge,frontend)", "app=web,tier!=canary", "!internal"}
	hostName := func() string { return fmt.Sprintf("h%03d.example.com", rng.IntN(hosts)) }
	// Wildcards cover h*.example.com (as *.example.com) and the second
	// level names below (*.hNNN.example.com).
	wildcard := func() string {
		if rng.IntN(4) == 0 {
			return "*.example.com"
		}
		return fmt.Sprintf("*.h%03d.example.com", rng.IntN(hosts))
	}
	states := []catalog.State{catalog.StateRunning, catalog.StateRunning, catalog.StatePaused, catalog.StateStandby, catalog.StateStopped}
	random := func(n int) catalog.Instance {
		opts := []opt{
			label("app", []string{"web", "api", "db"}[rng.IntN(3)]),
			label("tier", []string{"edge", "frontend", "canary"}[rng.IntN(3)]),
			state(states[rng.IntN(len(states))]),
			addr(fmt.Sprintf("10.0.%d.%d", n/200, n%200+1)),
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, label("internal", ""))
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, wake(), publish("", uint16(30000+n), 8080))
		}
		switch rng.IntN(5) {
		case 0: // no caddy.host
		case 1:
			opts = append(opts, host(hostName()))
		case 2:
			opts = append(opts, host(hostName()+", "+strings.ToUpper(hostName())))
		case 3: // R2a: a wildcard over some of the hosts
			opts = append(opts, host(wildcard()))
		case 4:
			opts = append(opts, host(strings.ToUpper(wildcard())+", "+hostName()))
		}
		// The name is random too: Puts rename instances.
		return inst(fmt.Sprintf("i-%03d", rng.IntN(1000)), append(opts, id(fmt.Sprintf("id-%d", n)))...)
	}

	c := catalog.New(catalog.Options{})
	views := make([]*catalog.View, len(sels))
	for i, s := range sels {
		views[i] = watch(c, s)
	}
	model := map[string]catalog.Instance{}
	for op := range ops {
		switch r := rng.IntN(100); {
		case r < 2:
			var list []catalog.Instance
			model = map[string]catalog.Instance{}
			for n := range instances {
				if rng.IntN(2) == 0 {
					i := random(n)
					list = append(list, i)
					model[i.ID] = i
				}
			}
			c.Replace(list)
		case r < 20:
			id := fmt.Sprintf("id-%d", rng.IntN(instances))
			delete(model, id)
			c.Delete(id)
		default:
			i := random(rng.IntN(instances))
			model[i.ID] = i
			c.Put(i)
		}

		rebuilt := catalog.New(catalog.Options{})
		rviews := make([]*catalog.View, len(sels))
		for i, s := range sels {
			rviews[i] = watch(rebuilt, s)
		}
		var list []catalog.Instance
		for _, i := range model {
			list = append(list, i)
		}
		rebuilt.Replace(list)

		got, want := c.Snapshot(), rebuilt.Snapshot()
		if got.Hosts() != want.Hosts() || got.Wildcards() != want.Wildcards() {
			t.Fatalf("op %d: Hosts(), Wildcards() = %d, %d, rebuilt %d, %d", op, got.Hosts(), got.Wildcards(), want.Hosts(), want.Wildcards())
		}
		for n := range 2 * (hosts + 1) { // one more: a host nobody lists
			h := n / 2
			name := fmt.Sprintf("h%03d.example.com", h)
			if n%2 == 1 {
				name = "www." + name // only wildcards claim these
			}
			if g, w := got.ClaimOf(name, nil), want.ClaimOf(name, nil); g != w {
				t.Fatalf("op %d: ClaimOf(%q) = %v, rebuilt %v", op, name, g, w)
			}
			if got.Claimed(name) != want.Claimed(name) {
				t.Fatalf("op %d: Claimed(%q) = %v, rebuilt %v", op, name, got.Claimed(name), want.Claimed(name))
			}
			// A rebuilt catalog has seen no instance freeze: compare
			// addresses, not their spellings.
			g := unspelt(targets(got.Targets(nil, catalog.Route{Port: 8080}, name)))
			w := targets(want.Targets(nil, catalog.Route{Port: 8080}, name))
			if !equal(g, w) {
				t.Fatalf("op %d: host route %s:\n got     %q\n rebuilt %q", op, name, g, w)
			}
			if h%10 != 0 && h%10 != 1 {
				continue
			}
			for v := range views {
				g := unspelt(targets(got.Targets(nil, catalog.Route{View: views[v], Port: 8080}, name)))
				w := targets(want.Targets(nil, catalog.Route{View: rviews[v], Port: 8080}, name))
				if !equal(g, w) {
					t.Fatalf("op %d: view %q, host %s:\n got     %q\n rebuilt %q", op, sels[v], name, g, w)
				}
			}
		}
	}
}

// Leave on stop (churn): Stopping takes an instance out at once; while its
// daemon still reports it running (an app draining after SIGTERM) it stays
// out until Started, a state that is not running, or a re-listing (which
// probes it again, R1a: a start missed during an outage must not keep it
// out for good).
func TestStoppingAndStarted(t *testing.T) {
	logger, logs := observed()
	var probes []catalog.ProbeRequest
	c := catalog.New(catalog.Options{Logger: logger, Probe: func(r catalog.ProbeRequest) { probes = append(probes, r) }})
	c.AddRoutePort(8080)
	v := watch(c, "app=web")
	web := func(opts ...opt) catalog.Instance {
		return inst("web-1", append([]opt{label("app", "web")}, opts...)...)
	}
	in := []string{"web-1 10.0.0.2:8080"}
	// ready answers the latest probe: the port accepts.
	ready := func() {
		r := probes[len(probes)-1]
		c.MarkReady(r.ID, r.Gen, true)
	}
	c.Put(web())
	ready()
	mustEqual(t, "running", request(c, v, 8080, "x"), in)

	c.Stopping("id-web-1")
	mustEqual(t, "stopping", request(c, v, 8080, "x"), nil)
	c.Put(web()) // the inspection after the kill: still running, draining
	mustEqual(t, "draining", request(c, v, 8080, "x"), nil)
	c.Put(web(state(catalog.StateStopped)))
	c.Put(web())
	mustEqual(t, "started, port not accepting yet", request(c, v, 8080, "x"), nil)
	ready()
	mustEqual(t, "stopped, then started", request(c, v, 8080, "x"), in)

	// docker restart: kill, die, stop, start; the start ends it.
	c.Stopping("id-web-1")
	c.Stopping("id-web-1")
	c.Started("id-web-1")
	mustEqual(t, "started, not yet inspected", request(c, v, 8080, "x"), nil)
	c.Put(web())
	ready()
	mustEqual(t, "restarted", request(c, v, 8080, "x"), in)

	// A re-listing ends the hold, and probes the instance again.
	c.Stopping("id-web-1")
	n := len(probes)
	c.Replace([]catalog.Instance{web()})
	if len(probes) != n+1 {
		t.Fatalf("a re-listing of an instance held as stopping sent %d probes, want 1", len(probes)-n)
	}
	mustEqual(t, "re-listed, until its port accepts", request(c, v, 8080, "x"), nil)
	ready()
	mustEqual(t, "re-listed and accepting", request(c, v, 8080, "x"), in)

	// Nothing to do for an instance that is not running, or unknown.
	c.Put(web(state(catalog.StatePaused)))
	c.Stopping("id-web-1")
	c.Stopping("id-nobody")
	c.Started("id-nobody")
	c.Put(web())
	ready()
	mustEqual(t, "unpaused", request(c, v, 8080, "x"), in) // the same address after the pause (R5a)

	var whys []string
	for _, e := range logs.FilterMessage("instance leaves rotation").All() {
		whys = append(whys, fmt.Sprint(e.ContextMap()["why"]))
	}
	mustEqual(t, "leave reasons", whys, []string{"stopping", "stopping", "stopping", "paused"})
}
