package docker

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// The translation of a container is the same whether it comes from the
// listing (container.Summary) or from an inspection
// (container.InspectResponse), so that a re-listing and an event agree:
//
//   - Name is the container's name without the leading "/".
//   - State follows the Engine's state word: running, paused, restarting,
//     exited and created (Stopped), dead (Failed), removing (Stopping).
//   - Health is the verdict of the container's health check, reported only
//     while the container is running (a stopped or paused container is not
//     routable whatever its last verdict, and the listing does not tell it).
//     HealthNone means no health check. A resumed container's "unhealthy"
//     that no check gave is the verdict from before its pause (R1c, see
//     inspectHealth): the listing cannot tell the two apart, so an unhealthy
//     container is inspected.
//   - Networks has one Attachment per network the container is on, in
//     network-name order: its IPv4 address and that network's gateway (the
//     host's own address on a bridge network), else its IPv6 ones. A
//     container that is not running has no address. Host and none network
//     modes give an attachment without an address (the host one marked
//     Host: the catalog routes to the host's address, R11h), and a
//     container that shares another's network stack (container:<id>, compose's
//     network_mode: service:x) one attachment named "container:<id>".
//   - Ports are the published port bindings, in guest-port order; a port
//     only exposed is not one. A binding on 0.0.0.0, :: or "" is on every
//     host address (HostIP ""), and the same port published on both 0.0.0.0
//     and :: is one entry.

// translated is a container as the session hands it on: its labels read
// under the connection's label sets (R2f: caddy-docker-proxy's and
// Traefik's translated or refused), its addresses as the daemon lets
// them be reached.
func (c *conn) translated(in catalog.Instance) catalog.Instance {
	in.Labels = foreignlabels.Apply(c.labels, in.Labels)
	return c.reachable(in)
}

// imageID is an image ID as the listing and the inspection both give it,
// without the "sha256:" that one daemon may give and the other not: an
// unchanged container must translate alike from either (no catalog write).
func imageID(id string) string { return strings.TrimPrefix(id, "sha256:") }

// fromSummary translates a container from the listing. ok is false when
// the summary does not tell the health of a running container (its Status
// text is not one this adapter knows): the caller inspects that container
// instead.
func fromSummary(c container.Summary) (inst catalog.Instance, ok bool) {
	h, known := healthFromStatus(c.Status)
	return summaryInstance(c, h, known)
}

// fromListed is fromSummary for a listing that gives each container's
// health beside it (Docker 29, HealthInList): the health is read from
// there, not from the Status text, whose wording is not a contract. An
// "unhealthy" is still inspected: only the inspection's check log tells a
// resumed container's verdict (R1c).
func fromListed(l Listed) (catalog.Instance, bool) {
	if l.Health == nil {
		return fromSummary(l.Summary)
	}
	h, known := listedHealth(l.Health.Status)
	return summaryInstance(l.Summary, h, known)
}

// listedHealth reads the listing's health status word.
func listedHealth(status string) (h catalog.Health, known bool) {
	switch status {
	case container.NoHealthcheck:
		return catalog.HealthNone, true
	case container.Starting:
		return catalog.HealthStarting, true
	case container.Healthy:
		return catalog.HealthHealthy, true
	case container.Unhealthy:
		return catalog.HealthUnhealthy, true
	}
	return catalog.HealthNone, false
}

// summaryInstance translates a listed container whose running health is h
// (known false: the listing does not tell it).
func summaryInstance(c container.Summary, h catalog.Health, known bool) (inst catalog.Instance, ok bool) {
	inst = catalog.Instance{
		ID:     c.ID,
		Name:   summaryName(c.Names),
		Labels: cloneLabels(c.Labels),
		State:  translateState(c.State),
		Image:  imageID(c.ImageID),
	}
	if inst.State == catalog.StateRunning {
		if !known || h == catalog.HealthUnhealthy {
			// An unhealthy one may be a resumed container whose check
			// has not run again yet (R1c): only its inspection tells.
			return inst, false
		}
		inst.Health = h
	}
	if c.NetworkSettings != nil {
		inst.Networks = attachments(c.NetworkSettings.Networks)
	}
	inst.Networks = sharedStack(inst.Networks, container.NetworkMode(c.HostConfig.NetworkMode))
	for _, p := range c.Ports {
		if p.PublicPort == 0 || p.PrivatePort == 0 {
			continue // exposed, not published
		}
		proto, ok := translateProto(p.Type)
		if !ok {
			continue
		}
		inst.Ports = append(inst.Ports, catalog.PublishedPort{
			HostIP:    hostIP(p.IP),
			HostPort:  p.PublicPort,
			GuestPort: p.PrivatePort,
			Protocol:  proto,
		})
	}
	inst.Ports = normalizePorts(inst.Ports)
	return inst, true
}

// fromInspect translates an inspected container.
func fromInspect(in container.InspectResponse) catalog.Instance {
	var inst catalog.Instance
	if in.ContainerJSONBase != nil {
		inst.ID = in.ID
		inst.Name = strings.TrimPrefix(in.Name, "/")
		inst.Image = imageID(in.Image)
		if st := in.State; st != nil {
			inst.State = inspectState(st)
			if inst.State == catalog.StateRunning {
				inst.Health = inspectHealth(st, in.Config)
			}
		}
	}
	if in.Config != nil {
		inst.Labels = cloneLabels(in.Config.Labels)
	}
	if ns := in.NetworkSettings; ns != nil {
		inst.Networks = attachments(ns.Networks)
	}
	if in.ContainerJSONBase != nil && in.HostConfig != nil {
		inst.Networks = sharedStack(inst.Networks, in.HostConfig.NetworkMode)
	}
	if ns := in.NetworkSettings; ns != nil {
		for port, bindings := range ns.Ports {
			guest, proto, ok := parsePort(port)
			if !ok {
				continue
			}
			for _, b := range bindings {
				hp, err := strconv.ParseUint(b.HostPort, 10, 16)
				if err != nil || hp == 0 {
					continue // not (or not yet) bound
				}
				inst.Ports = append(inst.Ports, catalog.PublishedPort{
					HostIP:    hostIP(b.HostIP),
					HostPort:  uint16(hp),
					GuestPort: guest,
					Protocol:  proto,
				})
			}
		}
		inst.Ports = normalizePorts(inst.Ports)
	}
	return inst
}

// summaryName picks the container's own name among the listing's names,
// which also holds the names it is linked as ("/other/alias").
func summaryName(names []string) string {
	for _, n := range names {
		if n = strings.TrimPrefix(n, "/"); n != "" && !strings.Contains(n, "/") {
			return n
		}
	}
	if len(names) > 0 {
		return strings.TrimPrefix(names[0], "/")
	}
	return ""
}

func cloneLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	return maps.Clone(l)
}

// translateState maps the Engine's state word.
func translateState(s string) catalog.State {
	switch s {
	case "running":
		return catalog.StateRunning
	case "paused":
		return catalog.StatePaused
	case "restarting":
		return catalog.StateRestarting
	case "exited", "created":
		return catalog.StateStopped
	case "dead":
		return catalog.StateFailed
	case "removing":
		return catalog.StateStopping
	default:
		return catalog.StateUnknown
	}
}

// inspectState uses the state word, else (an Engine that leaves it out)
// the state flags.
func inspectState(st *container.State) catalog.State {
	if st.Status != "" {
		return translateState(st.Status)
	}
	switch {
	case st.Dead:
		return catalog.StateFailed
	case st.Restarting:
		return catalog.StateRestarting
	case st.Paused:
		return catalog.StatePaused
	case st.Running:
		return catalog.StateRunning
	default:
		return catalog.StateStopped
	}
}

// inspectHealth is the verdict of a running container's health check. A
// check that is configured but has no health record yet has no verdict:
// HealthStarting, never HealthNone (which would make it routable). An
// "unhealthy" that no check gave (a resumed container, R1c) is the verdict
// from before the pause.
func inspectHealth(st *container.State, cfg *container.Config) catalog.Health {
	// Podman reports a health record with no status for a container
	// without a check (R11p): the configuration tells then.
	if h := st.Health; h != nil && h.Status != "" {
		switch h.Status {
		case container.Healthy:
			return catalog.HealthHealthy
		case container.Unhealthy:
			if _, resumed := resumedCheck(h, cfg); resumed {
				return verdictBeforePause(h)
			}
			return catalog.HealthUnhealthy
		case container.NoHealthcheck:
			return catalog.HealthNone
		default: // starting, or a status this client does not know
			return catalog.HealthStarting
		}
	}
	if cfg != nil && cfg.Healthcheck != nil && len(cfg.Healthcheck.Test) > 0 && cfg.Healthcheck.Test[0] != "NONE" {
		return catalog.HealthStarting
	}
	return catalog.HealthNone
}

// Why a resumed container's "unhealthy" is not a verdict (R1c): the Engine
// stops a container's health checks while it is paused and marks it
// unhealthy then ("for compatibility"), without running a check or counting
// a failure. After the unpause its checks resume only an interval later
// (30 s by default), and it stays "unhealthy" until then: a container
// resumed from pause standby would get no requests for a whole interval. A
// real unhealthy verdict takes Retries failures in a row (FailingStreak),
// so an "unhealthy" with fewer is the Engine's mark, and the verdict that
// stands is the one the checks gave before the pause.

// defaultRetries, defaultInterval and defaultTimeout are the Engine's
// defaults for a health check that sets none.
const (
	defaultRetries  = 3
	defaultInterval = 30 * time.Second
	defaultTimeout  = 30 * time.Second
)

// resumedCheck reports whether health h says "unhealthy" without the
// failures that verdict takes (the mark the Engine leaves on a paused
// container), and if so when the next check's result is due at the
// latest, from now: an interval, plus the check's timeout, plus a second.
func resumedCheck(h *container.Health, cfg *container.Config) (recheck time.Duration, resumed bool) {
	if h == nil || h.Status != container.Unhealthy {
		return 0, false
	}
	retries, interval, timeout := defaultRetries, defaultInterval, defaultTimeout
	if cfg != nil && cfg.Healthcheck != nil {
		hc := cfg.Healthcheck
		if hc.Retries > 0 {
			retries = hc.Retries
		}
		if hc.Interval > 0 {
			interval = hc.Interval
		}
		if hc.Timeout > 0 {
			timeout = hc.Timeout
		}
	}
	if h.FailingStreak >= retries {
		return 0, false
	}
	return interval + timeout + time.Second, true
}

// verdictBeforePause is the verdict a resumed container's checks gave
// before its pause: healthy if one of the last results (the Engine keeps
// five) passed, since fewer than Retries failed after it; else none yet.
func verdictBeforePause(h *container.Health) catalog.Health {
	for _, r := range h.Log {
		if r != nil && r.ExitCode == 0 {
			return catalog.HealthHealthy
		}
	}
	return catalog.HealthStarting
}

// healthFromStatus reads a running container's health from the listing's
// Status text, which the Engine writes as "Up 5 minutes", "Up 5 minutes
// (healthy)", "Up 5 minutes (unhealthy)" or "Up 5 minutes (health:
// starting)". known is false for any other text.
func healthFromStatus(status string) (h catalog.Health, known bool) {
	status = strings.TrimSpace(status)
	if !strings.HasPrefix(status, "Up ") {
		return catalog.HealthNone, false
	}
	if !strings.HasSuffix(status, ")") {
		return catalog.HealthNone, true // no health check
	}
	i := strings.LastIndex(status, " (")
	if i < 0 {
		return catalog.HealthNone, false
	}
	switch status[i+2 : len(status)-1] {
	case "healthy":
		return catalog.HealthHealthy, true
	case "unhealthy":
		return catalog.HealthUnhealthy, true
	case "health: starting":
		return catalog.HealthStarting, true
	}
	return catalog.HealthNone, false
}

// attachments lists the container's networks in name order.
func attachments(nets map[string]*network.EndpointSettings) []catalog.Attachment {
	if len(nets) == 0 {
		return nil
	}
	out := make([]catalog.Attachment, 0, len(nets))
	for name, ep := range nets {
		a := catalog.Attachment{Network: name, Host: name == "host"}
		if ep != nil {
			switch {
			case ep.IPAddress != "":
				a.Address, a.Gateway = ep.IPAddress, ep.Gateway
			case ep.GlobalIPv6Address != "":
				a.Address, a.Gateway = ep.GlobalIPv6Address, ep.IPv6Gateway
			}
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b catalog.Attachment) int { return strings.Compare(a.Network, b.Network) })
	return out
}

// sharedStack adds to nets, for a container that shares another's network
// stack and so is on no network of its own, the attachment that says so.
func sharedStack(nets []catalog.Attachment, mode container.NetworkMode) []catalog.Attachment {
	if !mode.IsContainer() || len(nets) > 0 {
		return nets
	}
	other := mode.ConnectedContainer()
	if len(other) == 64 {
		other = other[:12] // an ID, as docker ps shows it
	}
	return []catalog.Attachment{{Network: "container:" + other}}
}

// hostIP maps the Engine's "every address" forms to "".
func hostIP(ip string) string {
	switch ip {
	case "0.0.0.0", "::", "":
		return ""
	}
	return ip
}

func translateProto(p string) (catalog.Protocol, bool) {
	switch p {
	case "tcp", "":
		return catalog.TCP, true
	case "udp":
		return catalog.UDP, true
	}
	return 0, false // sctp
}

// parsePort splits "8080/tcp".
func parsePort(p nat.Port) (uint16, catalog.Protocol, bool) {
	n, err := strconv.ParseUint(p.Port(), 10, 16)
	if err != nil || n == 0 {
		return 0, 0, false
	}
	proto, ok := translateProto(p.Proto())
	return uint16(n), proto, ok
}

// normalizePorts sorts the ports and drops duplicates (a port published on
// both 0.0.0.0 and ::).
func normalizePorts(ps []catalog.PublishedPort) []catalog.PublishedPort {
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, func(a, b catalog.PublishedPort) int {
		return cmp.Or(
			cmp.Compare(a.GuestPort, b.GuestPort),
			cmp.Compare(a.Protocol, b.Protocol),
			strings.Compare(a.HostIP, b.HostIP),
			cmp.Compare(a.HostPort, b.HostPort),
		)
	})
	return slices.Compact(ps)
}

// SummaryState is the state and health of a listed container, as
// fromSummary reads them (the Swarm adapter reads its local task
// containers' with it); known is false when the listing does not tell a
// running container's health.
func SummaryState(c container.Summary) (state catalog.State, health catalog.Health, known bool) {
	state = translateState(c.State)
	if state != catalog.StateRunning {
		return state, catalog.HealthNone, true
	}
	health, known = healthFromStatus(c.Status)
	return state, health, known
}
