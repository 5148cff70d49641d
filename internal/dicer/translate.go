package dicer

import (
	"maps"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// translate turns a daemon instance into the catalog's neutral model.
// gateways maps network names to the host's address on each network; it may
// be nil (networks not listed).
func translate(in *dicerpb.Instance, gateways map[string]string) catalog.Instance {
	out := catalog.Instance{
		ID:            in.GetId(),
		Name:          in.GetName(),
		Labels:        maps.Clone(in.GetLabels()),
		State:         translateState(in.GetState()),
		Health:        translateHealth(in),
		Image:         in.GetImageDigest(),
		WakeOnConnect: in.GetStandbyAfter() != nil && in.GetStandbyAfter().AsDuration() > 0,
	}
	if len(out.Labels) == 0 {
		out.Labels = nil
	}
	// A Dicer instance is on exactly one network.
	if in.GetIp() != "" || in.GetNetworkName() != "" {
		out.Networks = []catalog.Attachment{{
			Network: in.GetNetworkName(),
			Address: in.GetIp(),
			Gateway: gateways[in.GetNetworkName()],
		}}
	}
	for _, p := range in.GetPorts() {
		if pp, ok := translatePort(p); ok {
			out.Ports = append(out.Ports, pp)
		}
	}
	return out
}

func translateState(s dicerpb.InstanceState) catalog.State {
	switch s {
	case dicerpb.InstanceState_INSTANCE_STATE_STOPPED:
		return catalog.StateStopped
	case dicerpb.InstanceState_INSTANCE_STATE_STARTING:
		return catalog.StateStarting
	case dicerpb.InstanceState_INSTANCE_STATE_RUNNING:
		return catalog.StateRunning
	case dicerpb.InstanceState_INSTANCE_STATE_PAUSED:
		return catalog.StatePaused
	case dicerpb.InstanceState_INSTANCE_STATE_STOPPING:
		return catalog.StateStopping
	case dicerpb.InstanceState_INSTANCE_STATE_RESTARTING:
		return catalog.StateRestarting
	case dicerpb.InstanceState_INSTANCE_STATE_FAILED:
		return catalog.StateFailed
	case dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
		return catalog.StateStandby
	default:
		return catalog.StateUnknown
	}
}

// translateHealth gives the last verdict of the instance's health check.
// The daemon leaves health unset unless the instance runs and has a check,
// so a running instance with an enabled check and no health yet has no
// verdict: HealthStarting, not HealthNone (which would make it routable).
func translateHealth(in *dicerpb.Instance) catalog.Health {
	hc := in.GetHealthCheck()
	if hc != nil && hc.GetDisabled() {
		return catalog.HealthNone
	}
	if h := in.GetHealth(); h != nil {
		switch h.GetStatus() {
		case dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY:
			return catalog.HealthHealthy
		case dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY:
			return catalog.HealthUnhealthy
		default: // STARTING, or a status this client does not know: no verdict
			return catalog.HealthStarting
		}
	}
	if hc != nil && in.GetState() == dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		return catalog.HealthStarting
	}
	return catalog.HealthNone
}

// translatePort drops mappings that cannot be a port (0 or above 65535),
// protocols this client does not know, and host addresses never dialled
// (R4b, see refusedHostIPs).
func translatePort(p *dicerpb.PortMapping) (catalog.PublishedPort, bool) {
	hp, gp := p.GetHostPort(), p.GetGuestPort()
	if hp == 0 || hp > 65535 || gp == 0 || gp > 65535 {
		return catalog.PublishedPort{}, false
	}
	var proto catalog.Protocol
	switch p.GetProtocol() {
	case dicerpb.Protocol_PROTOCOL_UNSPECIFIED, dicerpb.Protocol_PROTOCOL_TCP:
		proto = catalog.TCP
	case dicerpb.Protocol_PROTOCOL_UDP:
		proto = catalog.UDP
	default:
		return catalog.PublishedPort{}, false
	}
	hostIP := p.GetHostIp()
	if hostIP == "0.0.0.0" || hostIP == "::" {
		hostIP = "" // every host address, as the daemon stores it
	}
	if !follow.DialableHostIP(hostIP) {
		// R4b: never dialled (a link-local address such as the cloud
		// metadata service's 169.254.169.254); without the mapping,
		// requests go to the instance's own address, as for loopback.
		return catalog.PublishedPort{}, false
	}
	return catalog.PublishedPort{HostIP: hostIP, HostPort: uint16(hp), GuestPort: uint16(gp), Protocol: proto}, true
}

// gatewayMap indexes the listed networks' gateways by network name.
func gatewayMap(nets []*dicerpb.Network) map[string]string {
	m := make(map[string]string, len(nets))
	for _, n := range nets {
		if n.GetGateway() != "" {
			m[n.GetName()] = n.GetGateway()
		}
	}
	return m
}

// refusedHostIPs are the host addresses of in's port mappings that R4b
// never dials, for the warning that names the instance.
func refusedHostIPs(in *dicerpb.Instance) []string {
	var out []string
	for _, p := range in.GetPorts() {
		if ip := p.GetHostIp(); ip != "0.0.0.0" && ip != "::" && !follow.DialableHostIP(ip) {
			out = append(out, ip)
		}
	}
	return out
}
