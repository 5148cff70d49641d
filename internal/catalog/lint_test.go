package catalog_test

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func TestLabelTypos_R13c_near_misses_of_known_labels(t *testing.T) {
	for key, want := range map[string]string{
		"caddy.hots":          "caddy.host",
		"caddy.hosts":         "caddy.host",
		"cady.port":           "caddy.port",
		"caddy.prot":          "caddy.port",
		"caddy.netwrok":       "caddy.network",
		"caddy.standby_aftr":  "caddy.standby_after",
		"caddy.standby-after": "caddy.standby_after",
		"caddy.wieght":        "caddy.weight",
		"caddy.paths":         "caddy.path",
	} {
		got := catalog.LabelTypos(map[string]string{key: "x", "app": "web"})
		if len(got) != 1 || got[0].Key != key || got[0].Suggest != want {
			t.Errorf("%s: got %v, want a suggestion of %s", key, got, want)
		}
	}
}

func TestLabelTypos_R13c_leaves_other_caddy_labels_alone(t *testing.T) {
	labels := map[string]string{}
	for _, k := range append([]string{
		"caddy", "caddy_0", "caddy_1.host", "caddy.reverse_proxy", "caddy.reverse_proxy.health_uri", "caddy.root",
		"caddy.tls", "caddy.log", "caddy.@match.host", "caddy.encode", "caddy.handle_path", "caddy.bind",
		"caddy.redir", "caddy.header", "app", "com.docker.compose.project", "caddy.hostname.whatever.long.key",
		strings.Repeat("caddy.host", 100),
	}, catalog.KnownLabels...) {
		labels[k] = "x"
	}
	if got := catalog.LabelTypos(labels); len(got) != 0 {
		t.Errorf("warned about %v", got)
	}
}

func TestLabelTypos_R13c_warned_once_per_instance(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	inst := catalog.Instance{ID: "1", Name: "web", State: catalog.StateRunning,
		Labels: map[string]string{"caddy.hots": "x.test"}}
	c.Put(inst)
	inst.Health = catalog.HealthHealthy
	c.Put(inst) // same labels: no second warning
	warned := logs.FilterMessageSnippet("did you mean caddy.host?")
	if warned.Len() != 1 {
		t.Fatalf("%d warnings, want 1: %v", warned.Len(), warned.All())
	}
	f := warned.All()[0].ContextMap()
	if f["instance"] != "web" || f["label"] != "caddy.hots" || f["suggest"] != "caddy.host" {
		t.Errorf("warning fields %v", f)
	}
	st := c.Instances(nil)
	if len(st) != 1 || len(st[0].LabelTypos) != 1 || st[0].LabelTypos[0].Suggest != "caddy.host" {
		t.Errorf("instances: %+v", st)
	}
}

func BenchmarkLabelTypos(b *testing.B) {
	labels := map[string]string{"caddy.host": "a.test", "caddy.port": "80", "app": "web",
		"com.docker.compose.project": "x", "com.docker.compose.service": "web", "caddy.reverse_proxy": "{{upstreams}}"}
	for b.Loop() {
		catalog.LabelTypos(labels)
	}
}
