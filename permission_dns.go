package caddydicer

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// DNSRecords has Caddy publish a DNS record for each host an instance
// claims that the permission allows (its allow_suffix and selector, R7e):
// an A/AAAA record for each of `address`, or a CNAME to `cname`, in the
// zone the host is in, written through a `dns.providers` module (the
// same providers Caddy's ACME DNS challenge uses), with an owner TXT
// record `_caddy-dicer.<host>` beside it listing the records written.
// Once no instance has claimed the host for `grace`, both go. A host with
// records Caddy did not write (no owner TXT of its `owner`) is never
// touched, nor are records made by hand beside Caddy's; a name with a
// label starting with `_` gets none. See docs/dns-records.md.
type DNSRecords struct {
	// ProviderRaw is the DNS provider module, by its name in the
	// dns.providers namespace: `{"name": "rfc2136", "server":
	// "ns1.example.net:53", "key_name": "caddy", "key": "{env.TSIG_KEY}"}`,
	// or any libdns provider built in (cloudflare, route53, ...) that can
	// get, append and delete records. Required.
	ProviderRaw json.RawMessage `json:"provider,omitempty" caddy:"namespace=dns.providers inline_key=name"`

	// Zones are the DNS zones records are written in, as the provider
	// knows them; a host goes in the longest one it is under, and a host
	// under none gets no record. Example: `["example.com"]`. Required.
	Zones []string `json:"zones,omitempty"`

	// Addresses are this Caddy's public IP addresses, each an A (IPv4) or
	// AAAA (IPv6) record of every published host. Example:
	// `["203.0.113.7", "2001:db8::7"]`. Either this or cname is required.
	Addresses []string `json:"addresses,omitempty"`

	// CNAME is a name every published host is made an alias of (a load
	// balancer in front of the fleet), instead of addresses. A zone's apex
	// gets no CNAME. Example: `lb.example.net`.
	CNAME string `json:"cname,omitempty"`

	// TTL of the records written. Default: 60s.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// Grace is how long a host no instance claims keeps its records, so
	// that a redeploy does not flap the DNS. Default: 10m.
	Grace caddy.Duration `json:"grace,omitempty"`

	// Owner names this Caddy, or the fleet of Caddys sharing its storage,
	// in the owner TXT record
	// (`heritage=caddy-dicer,owner=<owner>,targets=<value>/...`): only the
	// records its owner's TXT lists are changed or removed. Caddys that
	// publish the same hosts share one owner; Caddys publishing different
	// hosts in one zone need different owners, else each removes the
	// others' records as unclaimed. Letters, digits, '.', '-' and '_', at
	// most 63. Default: `caddy-dicer`.
	Owner string `json:"owner,omitempty"`

	// MaxRecordsPerInstance bounds the hosts one instance has records
	// for (the first by name), counting those in their grace period that
	// it claimed last; its other hosts still route and get certificates.
	// Default: 25.
	MaxRecordsPerInstance int `json:"max_records_per_instance,omitempty"`

	// MaxRecords bounds the hosts with records in one zone, claimed or in
	// their grace period: past it the oldest in their grace period lose
	// their records first, and a new claim gets none while claimed hosts
	// fill it. Default: 1000.
	MaxRecords int `json:"max_records,omitempty"`

	publisher *dnsrecords.Publisher
}

var ownerPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// config checks the settings and makes the publisher's configuration,
// the provider aside.
func (r *DNSRecords) config() (dnsrecords.Config, error) {
	cfg := dnsrecords.Config{
		TTL: dnsrecords.DefaultTTL, Grace: dnsrecords.DefaultGrace, Owner: dnsrecords.DefaultOwner,
		MaxPerInstance: dnsrecords.DefaultMaxPerInstance, MaxPerZone: dnsrecords.DefaultMaxPerZone,
	}
	if len(r.Zones) == 0 {
		return cfg, setting.Errorf("dns_records zone", "wants the zones to write records in (e.g. example.com)")
	}
	for _, z := range r.Zones {
		d, err := allowedSuffix(z)
		if err != nil {
			return cfg, setting.Errorf("dns_records zone", "%q is not a zone name (e.g. example.com)", z)
		}
		cfg.Zones = append(cfg.Zones, d)
	}
	switch {
	case len(r.Addresses) > 0 && r.CNAME != "":
		return cfg, setting.Errorf("dns_records address", "and cname exclude each other: records point at addresses or are an alias")
	case len(r.Addresses) == 0 && r.CNAME == "":
		return cfg, setting.Errorf("dns_records address", "wants this Caddy's public addresses (or cname, a name to alias)")
	}
	for _, a := range r.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
			return cfg, setting.Errorf("dns_records address", "%q is not an IP address", a)
		}
		cfg.Addresses = append(cfg.Addresses, ip.Unmap())
	}
	if r.CNAME != "" {
		d, err := allowedSuffix(r.CNAME)
		if err != nil {
			return cfg, setting.Errorf("dns_records cname", "%q is not a domain name", r.CNAME)
		}
		cfg.CNAME = d
	}
	if r.TTL < 0 || r.Grace < 0 || r.MaxRecordsPerInstance < 0 || r.MaxRecords < 0 {
		return cfg, setting.Errorf("dns_records", "ttl, grace and the bounds cannot be negative")
	}
	if r.TTL > 0 {
		cfg.TTL = max(time.Duration(r.TTL), time.Second)
	}
	if r.Grace > 0 {
		cfg.Grace = time.Duration(r.Grace)
	}
	if r.Owner != "" {
		if !ownerPattern.MatchString(r.Owner) {
			return cfg, setting.Errorf("dns_records owner", "%q: letters, digits, '.', '-' and '_', at most 63", r.Owner)
		}
		cfg.Owner = r.Owner
	}
	if r.MaxRecordsPerInstance > 0 {
		cfg.MaxPerInstance = r.MaxRecordsPerInstance
	}
	if r.MaxRecords > 0 {
		cfg.MaxPerZone = r.MaxRecords
	}
	return cfg, nil
}

// provisionDNS loads the provider and starts the publisher of p's hosts.
func (p *hostPermission) provisionDNS(ctx caddy.Context) error {
	r := p.DNSRecords
	if r == nil {
		return nil
	}
	cfg, err := r.config()
	if err != nil {
		return err
	}
	if r.ProviderRaw == nil {
		return setting.Errorf("dns_records provider", "wants a DNS provider module, such as rfc2136 or cloudflare")
	}
	mod, err := ctx.LoadModule(r, "ProviderRaw")
	if err != nil {
		return setting.Wrap("dns_records provider", err)
	}
	prov, ok := mod.(dnsrecords.Provider)
	if !ok {
		return setting.Errorf("dns_records provider", "%s cannot get, append and delete records (a libdns provider)",
			mod.(caddy.Module).CaddyModule().ID)
	}
	cfg.Provider = prov
	if s := ctx.Storage(); s != nil {
		cfg.Locker = s
	}
	dicerapp.RegisterMetrics(ctx, dnsrecords.Updates, dnsrecords.Refused)
	p.startDNS(cfg)
	return nil
}

// startDNS starts the publisher of p's hosts with cfg.
func (p *hostPermission) startDNS(cfg dnsrecords.Config) {
	cfg.Logger = p.logger.Named("dns_records")
	p.DNSRecords.publisher = dnsrecords.New(cfg, dnsSource{p})
	p.DNSRecords.publisher.Start()
}

// cleanupDNS stops the publisher; the records stay for the next config's.
func (p *hostPermission) cleanupDNS() {
	if p.DNSRecords != nil && p.DNSRecords.publisher != nil {
		p.DNSRecords.publisher.Stop()
		p.DNSRecords.publisher = nil
	}
}

// dnsSource is the permission as its publisher sees it: the same decision
// as a certificate's (allow_suffix, selector, wildcards), so a tenant's
// label can never have a record written outside the allowed domains.
type dnsSource struct{ p *hostPermission }

func (s dnsSource) Snapshot() *catalog.Snapshot { return s.p.conn.Catalog().Snapshot() }
func (s dnsSource) Decide(host string) error    { return s.p.Decide(host) }

var _ dnsrecords.Source = dnsSource{}

// DNSStatus is the state of the permission's dns_records per zone, nil
// without them (for the admin API).
func (p *hostPermission) DNSStatus() []dnsrecords.ZoneStatus {
	if p.DNSRecords == nil || p.DNSRecords.publisher == nil {
		return nil
	}
	return p.DNSRecords.publisher.Status()
}

// unmarshalDNSRecords parses the dns_records block:
//
//	dns_records {
//		provider <name> { ... }
//		zone     <zone>...
//		address  <ip>...
//		cname    <name>
//		ttl      <duration>
//		grace    <duration>
//		owner    <name>
//		max_records_per_instance <n>
//		max_records              <n>
//	}
func unmarshalDNSRecords(d *caddyfile.Dispenser) (*DNSRecords, error) {
	r := new(DNSRecords)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(1) {
		name, ok, err := settingAt(d, seen, "provider", "zone", "address", "cname", "ttl", "grace", "owner",
			"max_records_per_instance", "max_records")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, d.Errf("unrecognized dns_records setting '%s'", d.Val())
		}
		if err := r.unmarshalSetting(d, name); err != nil {
			return nil, err
		}
	}
	if r.ProviderRaw == nil {
		return nil, settingErrf(d, "dns_records provider", "wants a DNS provider module, such as `provider rfc2136 { ... }`")
	}
	if _, err := r.config(); err != nil {
		return nil, d.WrapErr(err)
	}
	return r, nil
}

// unmarshalSetting parses one dns_records setting, name, the dispenser
// is at.
func (r *DNSRecords) unmarshalSetting(d *caddyfile.Dispenser, name string) error {
	switch name {
	case "provider":
		if !d.NextArg() {
			return d.ArgErr()
		}
		prov := d.Val()
		unm, err := caddyfile.UnmarshalModule(d, "dns.providers."+prov)
		if err != nil {
			return err
		}
		r.ProviderRaw = caddyconfig.JSONModuleObject(unm, "name", prov, nil)
	case "zone":
		r.Zones = d.RemainingArgs()
		if len(r.Zones) == 0 {
			return d.ArgErr()
		}
	case "address":
		r.Addresses = d.RemainingArgs()
		if len(r.Addresses) == 0 {
			return d.ArgErr()
		}
	case "cname":
		return oneValue(d, &r.CNAME)
	case "owner":
		return oneValue(d, &r.Owner)
	case "ttl", "grace":
		var raw string
		if err := oneValue(d, &raw); err != nil {
			return err
		}
		dur, err := caddy.ParseDuration(raw)
		if err != nil || dur <= 0 {
			return settingErrf(d, "dns_records "+name, "%q is not a positive duration (e.g. 10m)", raw)
		}
		if name == "ttl" {
			r.TTL = caddy.Duration(dur)
		} else {
			r.Grace = caddy.Duration(dur)
		}
	default:
		var raw string
		if err := oneValue(d, &raw); err != nil {
			return err
		}
		var n int
		if _, err := fmt.Sscan(raw, &n); err != nil || n <= 0 || strings.TrimSpace(raw) != fmt.Sprint(n) {
			return settingErrf(d, "dns_records "+name, "%q is not a positive whole number", raw)
		}
		if name == "max_records" {
			r.MaxRecords = n
		} else {
			r.MaxRecordsPerInstance = n
		}
	}
	return nil
}
