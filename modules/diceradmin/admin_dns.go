package diceradmin

import (
	"net/http"

	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// DNSZoneStatus is one zone of a permission's dns_records (R7e), as GET
// /dicer/dns answers it.
type DNSZoneStatus struct {
	// Kind and Daemon name the permission's daemon.
	Kind   string `json:"kind"`
	Daemon string `json:"daemon"`
	dnsrecords.ZoneStatus
}

// dnsPublisher is a permission with dns_records.
type dnsPublisher interface {
	DNSStatus() []dnsrecords.ZoneStatus
}

// dns serves GET /dicer/dns: each zone of each permission's dns_records,
// after its last pass: the hosts with records, those waiting for one, those
// in their grace period, those with records Caddy did not write, those
// past the bounds, and the last error with when it is retried.
func (adminDicer) dns(w http.ResponseWriter, _ *http.Request) error {
	out := []DNSZoneStatus{}
	for _, c := range dicerapp.Connections() {
		for _, p := range c.Permissions() {
			pub, ok := p.(dnsPublisher)
			if !ok {
				continue
			}
			for _, z := range pub.DNSStatus() {
				out = append(out, DNSZoneStatus{Kind: c.Kind(), Daemon: c.Address(), ZoneStatus: z})
			}
		}
	}
	return writeJSON(w, out)
}
