package diceradmin

import (
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// The parts of the wire types that the catalog's plain values fill in,
// and the copies from them: the JSON shape is the admin API's, the
// catalog knows none.

// NetworkStatus is a network an instance is attached to.
type NetworkStatus struct {
	Network string `json:"network"`
	Address string `json:"address"`
	Gateway string `json:"gateway,omitempty"`
}

// PortStatus is a port an instance publishes; HostIP "" is every host
// address.
type PortStatus struct {
	HostIP    string `json:"host_ip"`
	HostPort  uint16 `json:"host_port"`
	GuestPort uint16 `json:"guest_port"`
	Protocol  string `json:"protocol"`
}

// LabelTypo is a label key that looks like a misspelt known label (R13c).
type LabelTypo struct {
	// Key is the label key as the instance has it (escape it where a
	// person reads it).
	Key string `json:"key"`
	// Suggest is the known label key closest to Key.
	Suggest string `json:"suggest"`
}

// Candidate is one instance a route considered for a host, and what became
// of it.
type Candidate struct {
	Instance string `json:"instance"`
	// Target is set when requests go to the instance now, at Dial.
	Target bool   `json:"target"`
	Dial   string `json:"dial,omitempty"`
	// PassiveFails is the number of recent failures Caddy's passive
	// health checks count at Dial: with max_fails at or below it, Caddy
	// skips the target for fail_duration.
	PassiveFails int `json:"passive_fails,omitempty"`
	// Why says why requests go there ("routable", or the scale-to-zero
	// fallback, R5) or why not (an instance's verdict, or "caddy.host
	// lists only other hosts: ...").
	Why string `json:"why"`
	// LabelTypos are its label keys that look like misspelt known labels
	// (R13c), each with the closest known one.
	LabelTypos []LabelTypo `json:"label_typos,omitempty"`
}

// MaintenanceSwitch is a selector an operator put in maintenance (R5i).
type MaintenanceSwitch struct {
	Selector string `json:"selector"`
	Message  string `json:"message"`
	// From is the Caddy of the fleet it was set through (its host name
	// and instance ID), when a storage is shared (R4e).
	From string `json:"from,omitempty"`
}

// instanceStatus is st of connection c, on the wire.
func instanceStatus(c *connection.Conn, st catalog.InstanceStatus) InstanceStatus {
	out := InstanceStatus{Kind: c.Kind(), Daemon: c.Address(), ID: st.ID, Name: st.Name, State: st.State,
		DaemonState: st.DaemonState, Health: st.Health, Labels: st.Labels,
		Networks: make([]NetworkStatus, len(st.Networks)), Ports: make([]PortStatus, len(st.Ports)),
		Routable: st.Routable, Verdict: st.Verdict, Weight: st.Weight, RuntimeWeight: st.RuntimeWeight,
		LabelTypos: labelTypos(st.LabelTypos), Paths: st.Paths}
	for i, n := range st.Networks {
		out.Networks[i] = NetworkStatus(n)
	}
	for i, p := range st.Ports {
		out.Ports[i] = PortStatus(p)
	}
	if st.RuntimeWeight {
		out.RuntimeWeightFrom = c.SwitchOrigin(st.ID)
	}
	return out
}

func labelTypos(in []catalog.LabelTypo) []LabelTypo {
	if len(in) == 0 {
		return nil
	}
	out := make([]LabelTypo, len(in))
	for i, t := range in {
		out[i] = LabelTypo(t)
	}
	return out
}

func candidates(in []catalog.Candidate) []Candidate {
	out := make([]Candidate, len(in))
	for i, c := range in {
		out[i] = Candidate{Instance: c.Instance, Target: c.Target, Dial: c.Dial, PassiveFails: c.PassiveFails,
			Why: c.Why, LabelTypos: labelTypos(c.LabelTypos)}
	}
	return out
}

// maintenanceSwitches are c's selectors in maintenance, with where each
// came from.
func maintenanceSwitches(c *connection.Conn) []MaintenanceSwitch {
	in := c.Catalog().MaintenanceSwitches()
	out := make([]MaintenanceSwitch, len(in))
	for i, m := range in {
		out[i] = MaintenanceSwitch{Selector: m.Selector, Message: m.Message, From: c.MaintenanceOrigin(m.Selector)}
	}
	return out
}

// String says what the typo is, as the catalog's warning does.
func (t LabelTypo) String() string { return catalog.LabelTypo(t).String() }
