package dnsrecords

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R7e, a hostile tenant: an instance named to sort first ("0") lists
// another tenant's published host beside max_records_per_instance hosts
// of its own that sort before it. The victim's host, claimed by its own
// instance too, keeps its record past the grace period: a host claimed
// by several instances is charged to one with room (on cfa1203 it was
// charged to the first claimant by name, refused, and its record removed
// once its grace period ended).
func TestDNSRecords_R7e_shared_host_not_refused_by_anothers_cap(t *testing.T) {
	r := newRig(t, &memZone{}, nil, nil)
	r.claim("web", "www.example.test")
	r.settle(t, DefaultMaxPerZone)
	if !r.zone.has("www", "A") {
		t.Fatalf("the victim's record not written: %v", r.zone.recs)
	}
	var own []string
	for i := range DefaultMaxPerInstance {
		own = append(own, fmt.Sprintf("a%02d.example.test", i))
	}
	r.claim("0", strings.Join(own, ","))
	r.settle(t, DefaultMaxPerZone)
	r.claim("0", strings.Join(append(own, "www.example.test"), ","))
	r.settle(t, DefaultMaxPerZone)
	// The daemon listed again (a reconnection, a restart of Caddy): the
	// catalog holds each host's claimants by name.
	r.cat.Replace([]catalog.Instance{
		{ID: "web", Name: "web", State: catalog.StateRunning, Labels: map[string]string{catalog.LabelHost: "www.example.test"}},
		{ID: "0", Name: "0", State: catalog.StateRunning, Labels: map[string]string{catalog.LabelHost: strings.Join(append(own, "www.example.test"), ",")}},
	})
	r.settle(t, DefaultMaxPerZone)
	r.now = r.now.Add(2 * time.Minute) // past the grace period
	r.settle(t, DefaultMaxPerZone)
	if !r.zone.has("www", "A") {
		t.Fatalf("the victim's www.example.test lost its record to another instance's max_records_per_instance "+
			"(status %+v)", r.pub.Status())
	}
}
