package dicer

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

func TestTranslateStates(t *testing.T) {
	want := map[dicerpb.InstanceState]catalog.State{
		dicerpb.InstanceState_INSTANCE_STATE_UNSPECIFIED: catalog.StateUnknown,
		dicerpb.InstanceState_INSTANCE_STATE_STOPPED:     catalog.StateStopped,
		dicerpb.InstanceState_INSTANCE_STATE_STARTING:    catalog.StateStarting,
		dicerpb.InstanceState_INSTANCE_STATE_RUNNING:     catalog.StateRunning,
		dicerpb.InstanceState_INSTANCE_STATE_PAUSED:      catalog.StatePaused,
		dicerpb.InstanceState_INSTANCE_STATE_STOPPING:    catalog.StateStopping,
		dicerpb.InstanceState_INSTANCE_STATE_RESTARTING:  catalog.StateRestarting,
		dicerpb.InstanceState_INSTANCE_STATE_FAILED:      catalog.StateFailed,
		dicerpb.InstanceState_INSTANCE_STATE_STANDBY:     catalog.StateStandby,
		dicerpb.InstanceState(99):                        catalog.StateUnknown, // a newer daemon's state
	}
	// Every state the proto declares is mapped.
	for v := range dicerpb.InstanceState_name {
		if _, ok := want[dicerpb.InstanceState(v)]; !ok {
			t.Errorf("InstanceState %v has no expectation", dicerpb.InstanceState(v))
		}
	}
	for in, w := range want {
		if got := translate(&dicerpb.Instance{State: in}, nil).State; got != w {
			t.Errorf("state %v -> %v, want %v", in, got, w)
		}
	}
}

func TestTranslateHealth(t *testing.T) {
	running := dicerpb.InstanceState_INSTANCE_STATE_RUNNING
	check := &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Tcp{Tcp: &dicerpb.HealthCheckTCP{Port: 80}}}
	health := func(s dicerpb.HealthStatus) *dicerpb.Health { return &dicerpb.Health{Status: s} }
	tests := []struct {
		name string
		in   *dicerpb.Instance
		want catalog.Health
	}{
		{"no check, running", &dicerpb.Instance{State: running}, catalog.HealthNone},
		{"no check, stopped", &dicerpb.Instance{}, catalog.HealthNone},
		{"starting", &dicerpb.Instance{State: running, HealthCheck: check, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_STARTING)}, catalog.HealthStarting},
		{"healthy", &dicerpb.Instance{State: running, HealthCheck: check, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY)}, catalog.HealthHealthy},
		{"unhealthy", &dicerpb.Instance{State: running, HealthCheck: check, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY)}, catalog.HealthUnhealthy},
		{"health without the check field", &dicerpb.Instance{State: running, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY)}, catalog.HealthHealthy},
		{"unspecified status: no verdict", &dicerpb.Instance{State: running, HealthCheck: check, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_UNSPECIFIED)}, catalog.HealthStarting},
		{"check, running, health unset: no verdict yet", &dicerpb.Instance{State: running, HealthCheck: check}, catalog.HealthStarting},
		{"check, standby, health unset", &dicerpb.Instance{State: dicerpb.InstanceState_INSTANCE_STATE_STANDBY, HealthCheck: check}, catalog.HealthNone},
		{"check, paused, health unset", &dicerpb.Instance{State: dicerpb.InstanceState_INSTANCE_STATE_PAUSED, HealthCheck: check}, catalog.HealthNone},
		{"disabled check, running", &dicerpb.Instance{State: running, HealthCheck: &dicerpb.HealthCheck{Disabled: true}}, catalog.HealthNone},
		{"disabled check with stale health", &dicerpb.Instance{State: running, HealthCheck: &dicerpb.HealthCheck{Disabled: true}, Health: health(dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY)}, catalog.HealthNone},
	}
	for _, tt := range tests {
		if got := translate(tt.in, nil).Health; got != tt.want {
			t.Errorf("%s: health %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTranslatePorts(t *testing.T) {
	in := &dicerpb.Instance{Ports: []*dicerpb.PortMapping{
		{HostPort: 8080, GuestPort: 80}, // UNSPECIFIED = TCP
		{HostIp: "192.0.2.1", HostPort: 8443, GuestPort: 443, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostIp: "127.0.0.1", HostPort: 5353, GuestPort: 53, Protocol: dicerpb.Protocol_PROTOCOL_UDP},
		{HostIp: "0.0.0.0", HostPort: 9000, GuestPort: 9000, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostPort: 70000, GuestPort: 80},                               // host port out of range
		{HostPort: 8081, GuestPort: 65536},                             // guest port out of range
		{HostPort: 0, GuestPort: 80},                                   // no host port
		{HostPort: 8082, GuestPort: 82, Protocol: dicerpb.Protocol(9)}, // unknown protocol
		{HostPort: 65535, GuestPort: 1},
	}}
	want := []catalog.PublishedPort{
		{HostPort: 8080, GuestPort: 80, Protocol: catalog.TCP},
		{HostIP: "192.0.2.1", HostPort: 8443, GuestPort: 443, Protocol: catalog.TCP},
		{HostIP: "127.0.0.1", HostPort: 5353, GuestPort: 53, Protocol: catalog.UDP},
		{HostIP: "", HostPort: 9000, GuestPort: 9000, Protocol: catalog.TCP},
		{HostPort: 65535, GuestPort: 1, Protocol: catalog.TCP},
	}
	if got := translate(in, nil).Ports; !reflect.DeepEqual(got, want) {
		t.Errorf("ports\n got %+v\nwant %+v", got, want)
	}
	if got := translate(&dicerpb.Instance{}, nil).Ports; got != nil {
		t.Errorf("no ports: got %+v, want nil", got)
	}
}

func TestTranslateStandbyAfter(t *testing.T) {
	for _, tt := range []struct {
		name string
		d    *durationpb.Duration
		want bool
	}{
		{"unset", nil, false},
		{"zero", durationpb.New(0), false},
		{"negative", durationpb.New(-time.Minute), false},
		{"five minutes", durationpb.New(5 * time.Minute), true},
	} {
		if got := translate(&dicerpb.Instance{StandbyAfter: tt.d}, nil).WakeOnConnect; got != tt.want {
			t.Errorf("standby_after %s: WakeOnConnect %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTranslateFields(t *testing.T) {
	labels := map[string]string{"caddy.host": "shop.example.com", "app": "web"}
	in := &dicerpb.Instance{
		Id:          "id1",
		Name:        "web-1",
		Labels:      labels,
		State:       dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		Ip:          "172.20.0.7",
		NetworkName: "default",
		Env:         map[string]string{"SECRET": "x"},
	}
	gw := gatewayMap([]*dicerpb.Network{{Name: "default", Gateway: "172.20.0.1"}, {Name: "other", Gateway: "10.1.0.1"}, {Name: "nogw"}})
	got := translate(in, gw)
	want := catalog.Instance{
		ID: "id1", Name: "web-1", Labels: labels, State: catalog.StateRunning, Health: catalog.HealthNone,
		Networks: []catalog.Attachment{{Network: "default", Address: "172.20.0.7", Gateway: "172.20.0.1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("translate\n got %+v\nwant %+v", got, want)
	}
	// Labels are copied: the catalog never shares the message's map.
	labels["app"] = "changed"
	if got.Labels["app"] != "web" {
		t.Error("Labels share the proto message's map")
	}
	// Unknown network, or networks not listed: no gateway.
	in.NetworkName = "nogw"
	if g := translate(in, gw).Networks[0].Gateway; g != "" {
		t.Errorf("gateway of a network without one: %q", g)
	}
	if g := translate(in, nil).Networks[0].Gateway; g != "" {
		t.Errorf("gateway without a network list: %q", g)
	}
	if l := translate(&dicerpb.Instance{}, nil).Labels; l != nil {
		t.Errorf("no labels: %v, want nil", l)
	}
}
