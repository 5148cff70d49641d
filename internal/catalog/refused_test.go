package catalog_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// An instance whose foreign labels were refused (R2f) serves nothing on
// any route, even with a caddy.host of its own, claims no host, and is
// warned about once per refusal.
func TestPut_R2f_refused_instance_serves_nothing_warned_once(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	v := watch(c, "app=web")
	refused := label(catalog.LabelRefused, `caddy-docker-proxy label "caddy.basic_auth": ...`)
	c.Put(inst("web", host("a.test"), label("app", "web"), refused))
	c.Put(inst("web", host("a.test"), label("app", "web"), refused, health(catalog.HealthHealthy)))
	for _, r := range []catalog.Route{{Port: 80}, {Port: 80, View: v}} {
		if got := pick(c.Snapshot(), r, "a.test", "/"); got != "" {
			t.Errorf("routed to %q", got)
		}
	}
	if c.Snapshot().Claimed("a.test") {
		t.Error("a refused instance claims its host")
	}
	if n := logs.FilterMessageSnippet("(R2f)").Len(); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
	if st := c.Instances(nil); len(st) != 1 || st[0].Routable {
		t.Errorf("instances: %+v", st)
	}
	c.Put(inst("web", host("a.test"), label("app", "web")))
	if got := pick(c.Snapshot(), catalog.Route{Port: 80}, "a.test", "/"); got != "web" {
		t.Errorf("labels fixed: routed to %q", got)
	}
}

// Options.Refused, behind caddy_dicer_foreign_labels_refused_total, is
// called as the warning is given: once per instance and change of its
// refusal, with the set the refusal names; a value that names neither
// set (a Dicer instance's own dicer.refused) is not counted.
func TestRefused_R2f_counted_by_set_once_per_refusal(t *testing.T) {
	counted := map[string]int{}
	c := catalog.New(catalog.Options{Refused: func(set string) { counted[set]++ }})
	cdp := label(catalog.LabelRefused, `caddy-docker-proxy label "caddy.basic_auth": ...`)
	cdp2 := label(catalog.LabelRefused, `caddy-docker-proxy label "caddy.header": ...`)
	trf := label(catalog.LabelRefused, `traefik label "traefik.http.routers.r.middlewares": ...`)
	c.Put(inst("a", host("a.test"), cdp))
	c.Put(inst("a", host("a.test"), cdp, health(catalog.HealthHealthy))) // same refusal
	c.Put(inst("a", host("a.test"), cdp2))                               // another
	c.Put(inst("b", host("b.test"), trf))
	c.Put(inst("own", host("c.test"), label(catalog.LabelRefused, "set by the instance, {x=\"y\"}")))
	want := map[string]int{"caddy-docker-proxy": 2, "traefik": 1}
	if len(counted) != len(want) || counted["caddy-docker-proxy"] != 2 || counted["traefik"] != 1 {
		t.Fatalf("counted %v, want %v", counted, want)
	}
}
