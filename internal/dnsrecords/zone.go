package dnsrecords

import (
	"context"
	"strings"

	"github.com/libdns/libdns"
	"github.com/prometheus/client_golang/prometheus"
)

// Updates counts the publisher's calls to DNS providers:
// caddy_dicer_dns_updates_total{zone,op,result}, op one of read, create,
// delete, lock; result one of ok, error, canceled. Package-level, so
// counts survive config reloads; registered into each config's registry.
var Updates = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy", Subsystem: "dicer", Name: "dns_updates_total",
	Help: "Calls of the dns_records publisher (R7e) to its DNS provider, by zone, op (read, create, delete, lock) and result (ok, error, canceled).",
}, []string{"zone", "op", "result"})

var updates = Updates

// Refused counts the claimed hosts a publisher's caps leave without a
// record, once each as its refusal begins:
// caddy_dicer_dns_records_refused_total{zone,bound}, bound the setting
// of the cap, max_records or max_records_per_instance. Hosts in their
// grace period count against the caps (R7e).
var Refused = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy", Subsystem: "dicer", Name: "dns_records_refused_total",
	Help: "Claimed hosts the dns_records caps (R7e) leave without a record, by zone and bound (max_records, max_records_per_instance), each counted once as its refusal begins.",
}, []string{"zone", "bound"})

// zoneView is what a read of a zone tells the publisher, keyed by host
// (fully qualified, lower case, no trailing dot).
type zoneView struct {
	// owned holds the hosts with an owner TXT of ours.
	owned map[string]bool
	// current holds the hosts with the owner TXT this publisher writes
	// (its owner and targets) exactly.
	current map[string]bool
	// ownerRecs are those owner TXT records, as read.
	ownerRecs map[string][]libdns.Record
	// listed are the records (targetKey) the owner TXTs of ours list:
	// those are ours, the name's other records are not.
	listed map[string]map[string]bool
	// targets are each host's A, AAAA and CNAME records, as read.
	targets map[string][]libdns.Record
	// other holds the hosts with records of other types.
	other map[string]bool
}

// ours splits host's A, AAAA and CNAME records into those its owner
// TXTs list (ours) and the others (made by hand beside them).
func (v *zoneView) ours(host string) (ours, others []libdns.Record) {
	for _, r := range v.targets[host] {
		if v.listed[host][targetKey(r)] {
			ours = append(ours, r)
		} else {
			others = append(others, r)
		}
	}
	return ours, others
}

// read gets zone's records through the provider.
func (p *Publisher) read(zone string) (*zoneView, error) {
	var recs []libdns.Record
	err := p.call(zone, "read", func(ctx context.Context) error {
		var err error
		recs, err = p.cfg.Provider.GetRecords(ctx, zone)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p.view(zone, recs), nil
}

// view sorts recs, the records of zone, for the publisher.
func (p *Publisher) view(zone string, recs []libdns.Record) *zoneView {
	v := &zoneView{owned: map[string]bool{}, current: map[string]bool{}, ownerRecs: map[string][]libdns.Record{},
		listed: map[string]map[string]bool{}, targets: map[string][]libdns.Record{}, other: map[string]bool{}}
	for _, r := range recs {
		rr := r.RR()
		host := strings.ToLower(strings.TrimSuffix(libdns.AbsoluteName(rr.Name, zone), "."))
		switch rr.Type {
		case "A", "AAAA", "CNAME":
			v.targets[host] = append(v.targets[host], r)
		case "TXT":
			if owned, ok := p.ownerOf(host, zone); ok {
				text := strings.Trim(rr.Data, `"`)
				if listed, ok := p.parseOwnerText(text); ok {
					v.owned[owned] = true
					v.current[owned] = v.current[owned] || text == p.ownerText()
					v.ownerRecs[owned] = append(v.ownerRecs[owned], r)
					if v.listed[owned] == nil {
						v.listed[owned] = map[string]bool{}
					}
					for _, k := range listed {
						v.listed[owned][k] = true
					}
				}
				continue
			}
			v.other[host] = true
		default:
			v.other[host] = true
		}
	}
	return v
}

// parseOwnerText reads an owner TXT's text: whether it is of this
// publisher's owner, and the records (targetKey) it lists. A text
// without targets (written before they were listed) lists the records
// this publisher writes: it cannot tell more.
func (p *Publisher) parseOwnerText(text string) ([]string, bool) {
	rest, ok := strings.CutPrefix(text, ownerPrefixText(p.cfg.Owner))
	if !ok {
		return nil, false
	}
	if rest == "" {
		var keys []string
		for _, r := range p.targets("x") {
			keys = append(keys, targetKey(r))
		}
		return keys, true
	}
	values, ok := strings.CutPrefix(rest, ",targets=")
	if !ok {
		return nil, false // another owner whose name starts with ours
	}
	var keys []string
	for v := range strings.SplitSeq(values, "/") {
		if v != "" {
			keys = append(keys, valueKey(v))
		}
	}
	return keys, true
}

// ownerOf is the host whose owner TXT is at name, if name is one.
func (p *Publisher) ownerOf(name, zone string) (string, bool) {
	if name == OwnerPrefix+"."+zone {
		return zone, true
	}
	host, ok := strings.CutPrefix(name, OwnerPrefix+".")
	if !ok || !strings.HasSuffix(host, "."+zone) {
		return "", false
	}
	return host, true
}
