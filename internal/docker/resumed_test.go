package docker

import (
	"reflect"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1c: the Engine marks a paused container unhealthy without a check, and
// it stays so after the unpause until its next check. That mark is not a
// verdict: the one from before the pause stands.
func TestInspectHealth_resumed_container_keeps_its_verdict(t *testing.T) {
	pass := &container.HealthcheckResult{ExitCode: 0}
	fail := &container.HealthcheckResult{ExitCode: 1}
	check := &container.Config{Healthcheck: &container.HealthConfig{Test: []string{"CMD", "true"}, Retries: 2, Interval: 2 * time.Second, Timeout: time.Second}}
	tests := []struct {
		name    string
		health  container.Health
		want    catalog.Health
		recheck time.Duration // 0: none
	}{
		{"healthy before the pause", container.Health{Status: container.Unhealthy, Log: []*container.HealthcheckResult{pass}}, catalog.HealthHealthy, 4 * time.Second},
		{"healthy, then one failure of two", container.Health{Status: container.Unhealthy, FailingStreak: 1, Log: []*container.HealthcheckResult{pass, fail}}, catalog.HealthHealthy, 4 * time.Second},
		{"no verdict before the pause", container.Health{Status: container.Unhealthy}, catalog.HealthStarting, 4 * time.Second},
		{"failing in its start period", container.Health{Status: container.Unhealthy, Log: []*container.HealthcheckResult{fail}}, catalog.HealthStarting, 4 * time.Second},
		{"unhealthy by its checks", container.Health{Status: container.Unhealthy, FailingStreak: 2, Log: []*container.HealthcheckResult{pass, fail, fail}}, catalog.HealthUnhealthy, 0},
		{"healthy", container.Health{Status: container.Healthy, Log: []*container.HealthcheckResult{pass}}, catalog.HealthHealthy, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &container.State{Status: "running", Running: true, Health: &tt.health}
			if got := inspectHealth(st, check); got != tt.want {
				t.Errorf("inspectHealth = %v, want %v", got, tt.want)
			}
			d, resumed := resumedCheck(&tt.health, check)
			if resumed != (tt.recheck != 0) || d != tt.recheck {
				t.Errorf("resumedCheck = %v, %v; want a recheck in %v", d, resumed, tt.recheck)
			}
		})
	}
	// The Engine's defaults: 3 retries, 30 s interval and timeout.
	h := &container.Health{Status: container.Unhealthy, FailingStreak: 2, Log: []*container.HealthcheckResult{pass}}
	if d, resumed := resumedCheck(h, &container.Config{}); !resumed || d != 61*time.Second {
		t.Errorf("resumedCheck with the defaults = %v, %v; want a recheck in 61s", d, resumed)
	}
}

// The listing's "(unhealthy)" cannot tell the Engine's mark from a
// verdict: such a container is inspected.
func TestFromSummary_inspects_unhealthy(t *testing.T) {
	_, ok := fromSummary(container.Summary{ID: "a", Names: []string{"/a"}, State: "running", Status: "Up 3 minutes (unhealthy)"})
	if ok {
		t.Error("fromSummary took an unhealthy container's text for a verdict")
	}
	if _, ok := fromSummary(container.Summary{ID: "a", Names: []string{"/a"}, State: "running", Status: "Up 3 minutes (healthy)"}); !ok {
		t.Error("fromSummary asked to inspect a healthy container")
	}
}

func TestRechecks(t *testing.T) {
	r := newRechecks()
	r.after("a", time.Millisecond)
	r.after("a", time.Millisecond) // one timer per container
	select {
	case <-r.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no recheck")
	}
	if got := r.take(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("take = %v, want [a]", got)
	}
	r.after("b", time.Hour)
	r.stop()
	r.after("c", time.Millisecond)
	if len(r.timers) != 0 {
		t.Errorf("timers after stop: %v", r.timers)
	}
}

// R11h: a container sharing another's network stack is on one network,
// "container:<id>", without an address, from the listing and from an
// inspection alike; the host network is marked Host.
func TestTranslate_network_modes(t *testing.T) {
	id := "0123456789ab0123456789ab0123456789ab0123456789ab0123456789abcdef"
	s := container.Summary{ID: "c1", Names: []string{"/side"}, State: "running", Status: "Up 1 second"}
	s.HostConfig.NetworkMode = "container:" + id
	got, ok := fromSummary(s)
	want := []catalog.Attachment{{Network: "container:0123456789ab"}}
	if !ok || !reflect.DeepEqual(got.Networks, want) {
		t.Errorf("fromSummary, container:<id>: %+v, %v; want %+v", got.Networks, ok, want)
	}
	in := inspected("c1", "/side", container.State{Status: "running", Running: true}, &container.Config{}, nil, nil)
	in.HostConfig = &container.HostConfig{NetworkMode: container.NetworkMode("container:" + id)}
	if got := fromInspect(in); !reflect.DeepEqual(got.Networks, want) {
		t.Errorf("fromInspect, container:<id>: %+v, want %+v", got.Networks, want)
	}
	in = inspected("c2", "/h", container.State{Status: "running", Running: true}, &container.Config{},
		map[string]*network.EndpointSettings{"host": {}}, nil)
	in.HostConfig = &container.HostConfig{NetworkMode: "host"}
	if got := fromInspect(in); !reflect.DeepEqual(got.Networks, []catalog.Attachment{{Network: "host", Host: true}}) {
		t.Errorf("fromInspect, host: %+v", got.Networks)
	}
}
