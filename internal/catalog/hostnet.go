package catalog

import (
	"slices"
	"strings"
)

// Instances without an address of their own (R11h). On Docker:
//
//   - `--network host`: the container shares the host's network stack. Its
//     ports are the host's, so requests go to caddy.port (or the route's
//     port) at the host's address, as for a port published on every host
//     address (R4): published_port_host, else a remote Engine's host. Never
//     localhost, and not the gateway of a network the container is not on:
//     without either, it gets no requests, and the warning says how to fix
//     that.
//   - `--network none`: no networking at all.
//   - `--network container:<id>` (compose's `network_mode: service:x`): it
//     shares another container's network stack; the adapter reports that
//     as the network "container:<id>", with no address. Route to the other
//     container.

// containerNetworkPrefix starts the network name of an instance that
// shares another's network stack.
const containerNetworkPrefix = "container:"

// withHostAddress returns inst with the host's address (R4) on each of its
// host-network attachments, when the catalog knows one; inst itself is
// never changed.
func (r *reach) withHostAddress(inst Instance) Instance {
	i := slices.IndexFunc(inst.Networks, func(a Attachment) bool { return a.Host && a.Address == "" })
	if i < 0 {
		return inst
	}
	host := r.publishedHost("", "")
	if host == "" {
		return inst
	}
	inst.Networks = slices.Clone(inst.Networks)
	for j := i; j < len(inst.Networks); j++ {
		if inst.Networks[j].Host && inst.Networks[j].Address == "" {
			inst.Networks[j].Address = host
		}
	}
	return inst
}

// noAddress says why e has no address to route to on a route with the
// given network setting, or "" when it has one (the instance is taken to
// be running).
func (e *entry) noAddress(routeNetwork string) string {
	net := e.network(routeNetwork)
	switch {
	case net == nil && e.ambiguous && routeNetwork == "":
		return "on networks " + andList(e.networkNames()) + ", none chosen"
	case net == nil && routeNetwork != "":
		return "not on network " + routeNetwork
	case net == nil && e.inst.Labels[LabelNetwork] != "":
		return "not on network " + strings.TrimSpace(e.inst.Labels[LabelNetwork]) + " (its caddy.network label)" + e.onNetworks()
	case net == nil:
		return "on no network"
	case net.Address != "":
		return ""
	case net.Host:
		return "on the host's network, and no host address is known to reach it at (set the route's published_port_host to the host's address; never localhost, R4)"
	case net.Network == "none":
		return "on network none: it has no networking"
	case strings.HasPrefix(net.Network, containerNetworkPrefix):
		return "shares the network of " + net.Network + ": route to that container instead"
	}
	return "no address on its network"
}

// onNetworks is ": it is on a, b" for an instance on networks, else "".
func (e *entry) onNetworks() string {
	if len(e.inst.Networks) == 0 {
		return ": it is on none"
	}
	return ": it is on " + andList(e.networkNames())
}

// unreachable says why a running instance has no address on a route
// without a network setting, for the warning said once per cause; "" when
// it has one, is not running, or is on several networks with no choice
// (warned about on its own).
func (e *entry) unreachable() string {
	if e.inst.State != StateRunning || e.ambiguous && e.inst.Labels[LabelNetwork] == "" {
		return ""
	}
	return e.noAddress("")
}
