package docker

import (
	"reflect"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func TestHealthFromStatus(t *testing.T) {
	tests := []struct {
		status string
		want   catalog.Health
		known  bool
	}{
		{"Up 5 minutes", catalog.HealthNone, true},
		{"Up Less than a second", catalog.HealthNone, true},
		{"Up 5 minutes (healthy)", catalog.HealthHealthy, true},
		{"Up About a minute (unhealthy)", catalog.HealthUnhealthy, true},
		{"Up 2 seconds (health: starting)", catalog.HealthStarting, true},
		{" Up 2 seconds (healthy) ", catalog.HealthHealthy, true},
		{"Up 2 seconds (Paused)", catalog.HealthNone, false},   // not a running state's text
		{"Up 2 seconds (degraded)", catalog.HealthNone, false}, // a verdict this client does not know
		{"Up 2 seconds (health: unknown)", catalog.HealthNone, false},
		{"Up 2 seconds)", catalog.HealthNone, false},
		{"Running for 5 minutes", catalog.HealthNone, false}, // another Engine's wording
		{"", catalog.HealthNone, false},
	}
	for _, tt := range tests {
		h, known := healthFromStatus(tt.status)
		if h != tt.want || known != tt.known {
			t.Errorf("healthFromStatus(%q) = %v, %v; want %v, %v", tt.status, h, known, tt.want, tt.known)
		}
	}
}

func TestTranslateState(t *testing.T) {
	tests := map[string]catalog.State{
		"running":    catalog.StateRunning,
		"paused":     catalog.StatePaused,
		"restarting": catalog.StateRestarting,
		"exited":     catalog.StateStopped,
		"created":    catalog.StateStopped,
		"dead":       catalog.StateFailed,
		"removing":   catalog.StateStopping,
		"":           catalog.StateUnknown,
		"hibernated": catalog.StateUnknown,
	}
	for in, want := range tests {
		if got := translateState(in); got != want {
			t.Errorf("translateState(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestInspectStateFlags(t *testing.T) {
	tests := []struct {
		st   container.State
		want catalog.State
	}{
		{container.State{Running: true}, catalog.StateRunning},
		{container.State{Running: true, Paused: true}, catalog.StatePaused},
		{container.State{Running: true, Restarting: true}, catalog.StateRestarting},
		{container.State{Dead: true}, catalog.StateFailed},
		{container.State{}, catalog.StateStopped},
		{container.State{Status: "exited", Running: true}, catalog.StateStopped}, // the word wins
	}
	for _, tt := range tests {
		if got := inspectState(&tt.st); got != tt.want {
			t.Errorf("inspectState(%+v) = %v, want %v", tt.st, got, tt.want)
		}
	}
}

// Two networks, as the Engine reports them for a running container.
func runningNets() map[string]*network.EndpointSettings {
	return map[string]*network.EndpointSettings{
		"zeta":   {IPAddress: "172.18.0.2", Gateway: "172.18.0.1"},
		"bridge": {IPAddress: "172.17.0.2", Gateway: "172.17.0.1"},
	}
}

var wantNets = []catalog.Attachment{
	{Network: "bridge", Address: "172.17.0.2", Gateway: "172.17.0.1"},
	{Network: "zeta", Address: "172.18.0.2", Gateway: "172.18.0.1"},
}

func TestFromSummary(t *testing.T) {
	labels := map[string]string{catalog.LabelHost: "shop.example.com", "app": "web"}
	tests := []struct {
		name string
		in   container.Summary
		want catalog.Instance
		ok   bool
	}{
		{
			name: "running healthy on two networks, ports deduplicated and sorted",
			in: container.Summary{
				ID: "c1", Names: []string{"/other/alias", "/web"}, Labels: labels,
				State: "running", Status: "Up 3 minutes (healthy)",
				NetworkSettings: &container.NetworkSettingsSummary{Networks: runningNets()},
				Ports: []container.Port{
					{IP: "::", PrivatePort: 9000, PublicPort: 32768, Type: "udp"},
					{IP: "0.0.0.0", PrivatePort: 9000, PublicPort: 32768, Type: "udp"},
					{IP: "127.0.0.1", PrivatePort: 8080, PublicPort: 32769, Type: "tcp"},
					{PrivatePort: 8443, Type: "tcp"}, // exposed only
					{IP: "0.0.0.0", PrivatePort: 80, PublicPort: 8000, Type: "tcp"},
					{IP: "::", PrivatePort: 80, PublicPort: 8000, Type: "tcp"},
					{IP: "0.0.0.0", PrivatePort: 5000, PublicPort: 5000, Type: "sctp"}, // not TCP or UDP
				},
			},
			want: catalog.Instance{
				ID: "c1", Name: "web", Labels: labels, State: catalog.StateRunning, Health: catalog.HealthHealthy,
				Networks: wantNets,
				Ports: []catalog.PublishedPort{
					{HostIP: "", HostPort: 8000, GuestPort: 80, Protocol: catalog.TCP},
					{HostIP: "127.0.0.1", HostPort: 32769, GuestPort: 8080, Protocol: catalog.TCP},
					{HostIP: "", HostPort: 32768, GuestPort: 9000, Protocol: catalog.UDP},
				},
			},
			ok: true,
		},
		{
			name: "running without a health check",
			in:   container.Summary{ID: "c2", Names: []string{"/plain"}, State: "running", Status: "Up 2 seconds"},
			want: catalog.Instance{ID: "c2", Name: "plain", State: catalog.StateRunning, Health: catalog.HealthNone},
			ok:   true,
		},
		{
			name: "running, health starting",
			in:   container.Summary{ID: "c3", Names: []string{"/s"}, State: "running", Status: "Up 1 second (health: starting)"},
			want: catalog.Instance{ID: "c3", Name: "s", State: catalog.StateRunning, Health: catalog.HealthStarting},
			ok:   true,
		},
		{
			name: "running, unhealthy: inspect (R1c)",
			in:   container.Summary{ID: "c4", Names: []string{"/u"}, State: "running", Status: "Up 1 hour (unhealthy)"},
			ok:   false,
		},
		{
			name: "running, unknown status text: inspect",
			in:   container.Summary{ID: "c5", Names: []string{"/x"}, State: "running", Status: "Up 1 hour (degraded)"},
			want: catalog.Instance{ID: "c5", Name: "x", State: catalog.StateRunning},
			ok:   false,
		},
		{
			name: "exited: stopped, networks without addresses, no health",
			in: container.Summary{
				ID: "c6", Names: []string{"/old"}, State: "exited", Status: "Exited (0) 3 seconds ago",
				NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"bridge": {NetworkID: "n"}}},
			},
			want: catalog.Instance{ID: "c6", Name: "old", State: catalog.StateStopped, Networks: []catalog.Attachment{{Network: "bridge"}}},
			ok:   true,
		},
		{
			name: "created",
			in:   container.Summary{ID: "c7", Names: []string{"/new"}, State: "created", Status: "Created"},
			want: catalog.Instance{ID: "c7", Name: "new", State: catalog.StateStopped},
			ok:   true,
		},
		{
			name: "paused with a check: no health reported",
			in:   container.Summary{ID: "c8", Names: []string{"/p"}, State: "paused", Status: "Up 5 seconds (Paused)"},
			want: catalog.Instance{ID: "c8", Name: "p", State: catalog.StatePaused},
			ok:   true,
		},
		{
			name: "restarting",
			in:   container.Summary{ID: "c9", Names: []string{"/r"}, State: "restarting", Status: "Restarting (1) 2 seconds ago"},
			want: catalog.Instance{ID: "c9", Name: "r", State: catalog.StateRestarting},
			ok:   true,
		},
		{
			name: "dead",
			in:   container.Summary{ID: "c10", Names: []string{"/d"}, State: "dead", Status: "Dead"},
			want: catalog.Instance{ID: "c10", Name: "d", State: catalog.StateFailed},
			ok:   true,
		},
		{
			name: "removing",
			in:   container.Summary{ID: "c11", Names: []string{"/gone"}, State: "removing", Status: "Removal In Progress"},
			want: catalog.Instance{ID: "c11", Name: "gone", State: catalog.StateStopping},
			ok:   true,
		},
		{
			name: "IPv6-only network",
			in: container.Summary{
				ID: "c12", Names: []string{"/v6"}, State: "running", Status: "Up 1 second",
				NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{
					"v6net": {GlobalIPv6Address: "fd00::2", IPv6Gateway: "fd00::1"},
				}},
			},
			want: catalog.Instance{ID: "c12", Name: "v6", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "v6net", Address: "fd00::2", Gateway: "fd00::1"}}},
			ok:   true,
		},
		{
			name: "host network",
			in: container.Summary{
				ID: "c13", Names: []string{"/h"}, State: "running", Status: "Up 1 second",
				NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"host": {}}},
			},
			want: catalog.Instance{ID: "c13", Name: "h", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "host", Host: true}}},
			ok:   true,
		},
		{
			name: "empty labels are nil",
			in:   container.Summary{ID: "c14", Names: []string{"/e"}, Labels: map[string]string{}, State: "created"},
			want: catalog.Instance{ID: "c14", Name: "e", State: catalog.StateStopped},
			ok:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := fromSummary(tt.in)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fromSummary =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func inspected(id, name string, st container.State, cfg *container.Config, nets map[string]*network.EndpointSettings, ports nat.PortMap) container.InspectResponse {
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: name, State: &st},
		Config:            cfg,
		NetworkSettings: &container.NetworkSettings{
			NetworkSettingsBase: container.NetworkSettingsBase{Ports: ports}, //nolint:staticcheck // Ports moves out of it only in v29
			Networks:            nets,
		},
	}
}

var withCheck = &container.Config{Healthcheck: &container.HealthConfig{Test: []string{"CMD", "/hello", "-healthcheck"}}}

func TestFromInspect(t *testing.T) {
	labels := map[string]string{catalog.LabelHost: "shop.example.com", "app": "web"}
	tests := []struct {
		name string
		in   container.InspectResponse
		want catalog.Instance
	}{
		{
			name: "running healthy on two networks, ports deduplicated and sorted",
			in: inspected("c1", "/web", container.State{Status: "running", Running: true, Health: &container.Health{Status: container.Healthy}},
				&container.Config{Labels: labels, Healthcheck: withCheck.Healthcheck}, runningNets(), nat.PortMap{
					"9000/udp":  {{HostIP: "0.0.0.0", HostPort: "32768"}, {HostIP: "::", HostPort: "32768"}},
					"8080/tcp":  {{HostIP: "127.0.0.1", HostPort: "32769"}},
					"8443/tcp":  nil, // exposed only
					"80/tcp":    {{HostIP: "0.0.0.0", HostPort: "8000"}, {HostIP: "::", HostPort: "8000"}},
					"81/tcp":    {{HostIP: "", HostPort: ""}}, // not bound (yet)
					"5000/sctp": {{HostIP: "0.0.0.0", HostPort: "5000"}},
					"bogus":     {{HostIP: "0.0.0.0", HostPort: "1"}},
				}),
			want: catalog.Instance{
				ID: "c1", Name: "web", Labels: labels, State: catalog.StateRunning, Health: catalog.HealthHealthy,
				Networks: wantNets,
				Ports: []catalog.PublishedPort{
					{HostIP: "", HostPort: 8000, GuestPort: 80, Protocol: catalog.TCP},
					{HostIP: "127.0.0.1", HostPort: 32769, GuestPort: 8080, Protocol: catalog.TCP},
					{HostIP: "", HostPort: 32768, GuestPort: 9000, Protocol: catalog.UDP},
				},
			},
		},
		{
			name: "running without a check",
			in:   inspected("c2", "/plain", container.State{Status: "running", Running: true}, &container.Config{}, nil, nil),
			want: catalog.Instance{ID: "c2", Name: "plain", State: catalog.StateRunning},
		},
		{
			name: "running, check disabled by NONE",
			in: inspected("c2b", "/none", container.State{Status: "running", Running: true},
				&container.Config{Healthcheck: &container.HealthConfig{Test: []string{"NONE"}}}, nil, nil),
			want: catalog.Instance{ID: "c2b", Name: "none", State: catalog.StateRunning},
		},
		{
			name: "running, health starting",
			in:   inspected("c3", "/s", container.State{Status: "running", Running: true, Health: &container.Health{Status: container.Starting}}, withCheck, nil, nil),
			want: catalog.Instance{ID: "c3", Name: "s", State: catalog.StateRunning, Health: catalog.HealthStarting},
		},
		{
			name: "running, unhealthy",
			in:   inspected("c4", "/u", container.State{Status: "running", Running: true, Health: &container.Health{Status: container.Unhealthy, FailingStreak: 3}}, withCheck, nil, nil),
			want: catalog.Instance{ID: "c4", Name: "u", State: catalog.StateRunning, Health: catalog.HealthUnhealthy},
		},
		{
			name: "running, check configured, no record yet: no verdict",
			in:   inspected("c5", "/n", container.State{Status: "running", Running: true}, withCheck, nil, nil),
			want: catalog.Instance{ID: "c5", Name: "n", State: catalog.StateRunning, Health: catalog.HealthStarting},
		},
		{
			name: "running, unknown health status: no verdict",
			in:   inspected("c5b", "/q", container.State{Status: "running", Running: true, Health: &container.Health{Status: "degraded"}}, withCheck, nil, nil),
			want: catalog.Instance{ID: "c5b", Name: "q", State: catalog.StateRunning, Health: catalog.HealthStarting},
		},
		{
			name: "exited with a last verdict: stopped, no health",
			in: inspected("c6", "/old", container.State{Status: "exited", Health: &container.Health{Status: container.Unhealthy}}, withCheck,
				map[string]*network.EndpointSettings{"bridge": {NetworkID: "n"}}, nat.PortMap{}),
			want: catalog.Instance{ID: "c6", Name: "old", State: catalog.StateStopped, Networks: []catalog.Attachment{{Network: "bridge"}}},
		},
		{
			name: "paused with a verdict: no health reported",
			in:   inspected("c8", "/p", container.State{Status: "paused", Running: true, Paused: true, Health: &container.Health{Status: container.Healthy}}, withCheck, nil, nil),
			want: catalog.Instance{ID: "c8", Name: "p", State: catalog.StatePaused},
		},
		{
			name: "dead",
			in:   inspected("c10", "/d", container.State{Status: "dead", Dead: true}, nil, nil, nil),
			want: catalog.Instance{ID: "c10", Name: "d", State: catalog.StateFailed},
		},
		{
			name: "nothing but an ID",
			in:   container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c11"}},
			want: catalog.Instance{ID: "c11"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromInspect(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fromInspect =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

// The instance handed over does not share the labels map with the
// Engine's response: the sink may keep it.
func TestTranslateCopiesLabels(t *testing.T) {
	labels := map[string]string{"app": "web"}
	s, _ := fromSummary(container.Summary{ID: "a", Labels: labels, State: "created"})
	i := fromInspect(inspected("a", "/a", container.State{Status: "created"}, &container.Config{Labels: labels}, nil, nil))
	labels["app"] = "changed"
	if s.Labels["app"] != "web" || i.Labels["app"] != "web" {
		t.Fatalf("labels shared with the source: %v, %v", s.Labels, i.Labels)
	}
}

// Whatever the order of the Engine's maps, the result is the same.
func TestFromInspectDeterministic(t *testing.T) {
	in := inspected("c", "/c", container.State{Status: "running"}, nil, map[string]*network.EndpointSettings{
		"a": {IPAddress: "10.0.1.2"}, "b": {IPAddress: "10.0.2.2"}, "c": {IPAddress: "10.0.3.2"}, "d": {IPAddress: "10.0.4.2"},
	}, nat.PortMap{
		"1/tcp": {{HostPort: "1001"}}, "2/tcp": {{HostPort: "1002"}}, "3/udp": {{HostPort: "1003"}}, "4/tcp": {{HostPort: "1004"}},
	})
	first := fromInspect(in)
	for range 50 {
		if got := fromInspect(in); !reflect.DeepEqual(got, first) {
			t.Fatalf("results differ:\n  %+v\n  %+v", got, first)
		}
	}
}

func TestSummaryName(t *testing.T) {
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"/web"}, "web"},
		{[]string{"/app/db", "/db"}, "db"},
		{[]string{"/app/db"}, "app/db"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := summaryName(tt.names); got != tt.want {
			t.Errorf("summaryName(%q) = %q, want %q", tt.names, got, tt.want)
		}
	}
}
