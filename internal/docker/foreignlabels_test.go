package docker

import (
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// With the connection's `labels` setting, a container's
// caddy-docker-proxy or Traefik labels become caddy.host and the rest as
// the session hands the container on (R2f); without it, they are left as
// they are.
func TestTranslate_R2f_label_sets(t *testing.T) {
	summary := container.Summary{ID: "c1", Names: []string{"/web"}, State: "running", Status: "Up 1 second",
		Labels: map[string]string{"caddy": "a.example.com", "caddy.handle_path": "/api/*", "caddy.handle_path.0_reverse_proxy": "{{upstreams 8080}}"}}
	in, _ := fromSummary(summary)
	got := (&conn{labels: foreignlabels.SetCaddyDicer | foreignlabels.SetCaddyDockerProxy}).translated(in)
	if got.Labels[catalog.LabelHost] != "a.example.com" || got.Labels[catalog.LabelPath] != "/api" || got.Labels[catalog.LabelPort] != "8080" {
		t.Errorf("caddy-docker-proxy read: %v", got.Labels)
	}
	if plain := (&conn{}).translated(in); plain.Labels[catalog.LabelHost] != "" {
		t.Errorf("default read caddy-docker-proxy's labels: %v", plain.Labels)
	}
	summary.Labels["caddy.basic_auth.admin"] = "$2a$14$hash"
	in, _ = fromSummary(summary)
	got = (&conn{labels: foreignlabels.SetCaddyDockerProxy}).translated(in)
	if got.Labels[catalog.LabelRefused] == "" || got.Labels[catalog.LabelHost] != "" {
		t.Errorf("basic_auth not refused: %v", got.Labels)
	}
}

// The label sets are part of the connection's key: two modules reading
// different sets share no catalog.
func TestNew_R2f_label_sets_in_the_key(t *testing.T) {
	a, err := New(Config{Host: DefaultHost})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Host: DefaultHost, Labels: foreignlabels.SetCaddyDockerProxy})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() == b.Key() {
		t.Error("same key")
	}
}

// Two connections to one Engine that read different label sets are one
// Engine: equal EngineKeys, so that they share its instances'
// scale-to-zero state (R5f) and, on Swarm, the services' load (R5j);
// another Engine has another.
func TestNew_R5f_label_sets_are_one_engine(t *testing.T) {
	a, err := New(Config{Host: DefaultHost})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Host: DefaultHost, Labels: foreignlabels.SetCaddyDockerProxy})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Host: "unix:///run/other.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if a.EngineKey() != b.EngineKey() {
		t.Error("the label sets changed the Engine's key: two standby states for one Engine's containers")
	}
	if a.EngineKey() == c.EngineKey() {
		t.Error("two Engines with one key")
	}
}
