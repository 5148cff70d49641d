package docker

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// FuzzTranslate builds a container from fuzzed parts (name, labels
// caddy.host, caddy.port and caddy.network, state, health, a network map
// that may be nil, hold empty names, nil endpoints or bad IPs, and port
// bindings) as both the listing and an inspection report it, and checks:
//   - neither translation panics, and both give the same instance, so that
//     a re-listing and an event agree;
//   - ID, Name (without the leading "/") and Labels are as given, and the
//     labels are a copy;
//   - the attachments are the given networks, in name order, each with the
//     endpoint's IPv4 address and gateway, else its IPv6 ones;
//   - the ports are the given bindings with both ports set, host port and
//     guest port in 1..65535, sorted and without duplicates;
//   - a catalog routes the instance without panicking, only to a port in
//     1..65535, and never when caddy.port is not a port.
func FuzzTranslate(f *testing.F) {
	f.Add("c1", "/web", "shop.example.com", "8080", "front", "running", "Up 3 minutes", uint8(0),
		"front", "172.18.0.2", "172.18.0.1", "", "back", "", "", "fd00::2", uint16(8080), uint16(32768), "0.0.0.0", "tcp", true)
	f.Add("c2", "/app/db", "", "", "", "running", "Up 1 second (healthy)", uint8(2),
		"bridge", "172.17.0.2", "172.17.0.1", "", "", "not-an-ip", "", "", uint16(80), uint16(8000), "::", "", false)
	f.Add("", "", "a,B.,[fd00::1]:443", "0", "missing", "paused", "Up 5 seconds (Paused)", uint8(3),
		"", "", "", "", "host", "", "", "", uint16(0), uint16(1), "127.0.0.1", "udp", true)
	f.Add("c4", "/x", "x", "65536", "n", "exited", "Exited (0) 3 seconds ago", uint8(1),
		"n", "999.1.1.1", "gw", "fe80::1%eth0", "", "", "", "", uint16(65535), uint16(65535), "bad ip", "sctp", true)
	f.Add("c5", "/y", "y", " 443 ", "", "weird", "", uint8(9),
		"same", "10.0.0.2", "", "", "same", "10.0.0.3", "", "", uint16(443), uint16(0), "", "tcp", false)
	f.Fuzz(func(t *testing.T, id, name, hostLabel, portLabel, netLabel, state, status string, health uint8,
		net1, ip1, gw1, ip6a, net2, ip2, gw2, ip6b string, private, public uint16, hostIP, proto string, withNets bool,
	) {
		labels := map[string]string{"app": "web"}
		for k, v := range map[string]string{catalog.LabelHost: hostLabel, catalog.LabelPort: portLabel, catalog.LabelNetwork: netLabel} {
			if v != "" {
				labels[k] = v
			}
		}
		var nets map[string]*network.EndpointSettings
		if withNets {
			nets = map[string]*network.EndpointSettings{
				net1: {IPAddress: ip1, Gateway: gw1, GlobalIPv6Address: ip6a, IPv6Gateway: gw1},
			}
			if net2 != net1 {
				nets[net2] = nil // an endpoint the Engine left out
				if ip2 != "" || ip6b != "" {
					nets[net2] = &network.EndpointSettings{IPAddress: ip2, Gateway: gw2, GlobalIPv6Address: ip6b}
				}
			}
		}
		if strings.Contains(proto, "/") {
			proto = "tcp" // the Engine's port keys are "<port>/<proto>"
		}
		// The fuzzed status text, else one for each verdict; the inspection
		// reports the verdict the text tells.
		summaryStatus, inspectHealthStatus := status, ""
		switch h, _ := healthFromStatus(status); health % 4 {
		case 0:
			inspectHealthStatus = map[catalog.Health]string{
				catalog.HealthStarting: container.Starting, catalog.HealthHealthy: container.Healthy, catalog.HealthUnhealthy: container.Unhealthy,
			}[h]
		case 1:
			summaryStatus, inspectHealthStatus = "Up 1 second (health: starting)", container.Starting
		case 2:
			summaryStatus, inspectHealthStatus = "Up 1 second (healthy)", container.Healthy
		case 3:
			summaryStatus, inspectHealthStatus = "Up 1 second (unhealthy)", container.Unhealthy
		}
		summary := container.Summary{
			ID: id, Names: []string{name}, Labels: labels, State: state, Status: summaryStatus,
			NetworkSettings: &container.NetworkSettingsSummary{Networks: nets},
			Ports:           []container.Port{{IP: hostIP, PrivatePort: private, PublicPort: public, Type: proto}},
		}
		st := container.State{Status: state}
		cfg := &container.Config{Labels: labels}
		if inspectHealthStatus != "" {
			st.Health = &container.Health{Status: inspectHealthStatus, FailingStreak: 3}
			cfg.Healthcheck = &container.HealthConfig{Test: []string{"CMD", "true"}}
		}
		inspect := inspected(id, name, st, cfg, nets, nat.PortMap{
			nat.Port(strconv.Itoa(int(private)) + "/" + proto): {{HostIP: hostIP, HostPort: strconv.Itoa(int(public))}},
		})

		fromList, ok := fromSummary(summary)
		got := fromInspect(inspect)
		if state == "" {
			// Without a state word, an inspection falls back to the state
			// flags, which the listing does not have.
			fromList.State = got.State
		}
		if ok && !reflect.DeepEqual(fromList, got) {
			t.Fatalf("listing and inspection disagree:\n  fromSummary %+v\n  fromInspect %+v", fromList, got)
		}
		if !ok && (state != "running" || health%4 != 0 && health%4 != 3) {
			t.Fatalf("fromSummary: not ok for state %q, status %q", state, summaryStatus)
		}

		wantName := strings.TrimPrefix(name, "/")
		if got.ID != id || got.Name != wantName {
			t.Fatalf("ID, Name = %q, %q; want %q, %q", got.ID, got.Name, id, wantName)
		}
		if !maps.Equal(got.Labels, labels) {
			t.Fatalf("Labels = %v, want %v", got.Labels, labels)
		}
		got.Labels["app"] = "changed"
		if labels["app"] != "web" {
			t.Fatal("the instance shares its labels map with the Engine's response")
		}
		got.Labels["app"] = "web"

		checkAttachments(t, got.Networks, nets)
		checkPorts(t, got.Ports, private, public, hostIP, proto)

		c := catalog.New(catalog.Options{})
		c.Replace([]catalog.Instance{got})
		wantPort, portErr := strconv.Atoi(strings.TrimSpace(portLabel))
		badPort := portLabel != "" && (portErr != nil || wantPort < 1 || wantPort > 65535)
		for _, route := range []catalog.Route{{}, {Port: 9000}, {Network: net1}, {Network: net2, Port: 1}} {
			for _, ts := range c.Snapshot().Targets(nil, route, catalog.NormalizeHost(hostLabel)) {
				if badPort {
					t.Fatalf("route %+v: caddy.port %q is not a port, yet a target %+v", route, portLabel, ts)
				}
				// The host part is the Engine's address as given, bad or not;
				// the port is the catalog's.
				n, err := strconv.Atoi(ts.Dial[strings.LastIndexByte(ts.Dial, ':')+1:])
				if err != nil || n < 1 || n > 65535 {
					t.Fatalf("route %+v: target %+v dials no port in 1..65535", route, ts)
				}
				if !badPort && portLabel != "" && n != wantPort && !publishedFor(got.Ports, wantPort, n) {
					t.Fatalf("route %+v: target %+v, want caddy.port %d or the host port publishing it", route, ts, wantPort)
				}
			}
		}
	})
}

// checkAttachments checks that the instance is on exactly the given
// networks, in name order, with the addresses given.
func checkAttachments(t *testing.T, got []catalog.Attachment, nets map[string]*network.EndpointSettings) {
	t.Helper()
	if len(got) != len(nets) {
		t.Fatalf("Networks = %+v, want one per network of %v", got, slices.Collect(maps.Keys(nets)))
	}
	for i, a := range got {
		if i > 0 && got[i-1].Network >= a.Network {
			t.Fatalf("Networks = %+v: not in name order", got)
		}
		ep, ok := nets[a.Network]
		if !ok {
			t.Fatalf("Networks = %+v: %q is not one of the container's", got, a.Network)
		}
		var want catalog.Attachment
		switch {
		case ep == nil:
		case ep.IPAddress != "":
			want = catalog.Attachment{Address: ep.IPAddress, Gateway: ep.Gateway}
		case ep.GlobalIPv6Address != "":
			want = catalog.Attachment{Address: ep.GlobalIPv6Address, Gateway: ep.IPv6Gateway}
		}
		want.Network, want.Host = a.Network, a.Network == "host" // R11h
		if a != want {
			t.Fatalf("attachment %+v, want %+v", a, want)
		}
	}
}

// checkPorts checks the instance's ports against the one binding given.
func checkPorts(t *testing.T, got []catalog.PublishedPort, private, public uint16, hostIP, proto string) {
	t.Helper()
	p, known := translateProto(proto)
	if private == 0 || public == 0 || !known {
		if len(got) != 0 {
			t.Fatalf("Ports = %+v, want none for %d->%d/%q", got, public, private, proto)
		}
		return
	}
	wantIP := hostIP
	if hostIP == "0.0.0.0" || hostIP == "::" {
		wantIP = ""
	}
	want := []catalog.PublishedPort{{HostIP: wantIP, HostPort: public, GuestPort: private, Protocol: p}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Ports = %+v, want %+v", got, want)
	}
}

// publishedFor reports whether hostPort publishes guestPort over TCP.
func publishedFor(ports []catalog.PublishedPort, guestPort, hostPort int) bool {
	for _, p := range ports {
		if p.Protocol == catalog.TCP && int(p.GuestPort) == guestPort && int(p.HostPort) == hostPort {
			return true
		}
	}
	return false
}
