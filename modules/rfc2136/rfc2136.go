// Package rfc2136 is a libdns provider, the Caddy module
// `dns.providers.rfc2136`, that writes records with DNS UPDATE (RFC 2136)
// signed by a TSIG key (RFC 8945) and reads a zone by a TSIG-signed zone
// transfer (AXFR), as BIND 9, Knot and PowerDNS accept them. Caddy's ACME
// DNS-01 challenge can use it, and so can the permissions' dns_records
// (R7e, docs/dns-records.md).
package rfc2136

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/libdns/libdns"
	"github.com/miekg/dns"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

func init() {
	caddy.RegisterModule(Provider{})
}

// DefaultAlgorithm is the TSIG algorithm when none is set.
const DefaultAlgorithm = "hmac-sha256"

// defaultTimeout bounds one exchange with the server when timeout is not set.
const defaultTimeout = 10 * time.Second

// The bounds of one zone transfer when max_transfer_records and
// max_transfer_bytes are not set: a zone past them is refused whole,
// rather than held in memory, whatever the server sends.
const (
	DefaultMaxTransferRecords = 100_000
	DefaultMaxTransferBytes   = 32 << 20
)

// ErrTransferTooLarge is the error of a zone transfer past
// max_transfer_records or max_transfer_bytes; the error wrapping it names
// the setting.
var ErrTransferTooLarge = errors.New("zone transfer too large")

// errUnsigned is the error of an answer without a TSIG record to a
// signed request: anyone on the path could have made it.
var errUnsigned = errors.New("the answer is not signed with the TSIG key (refused: anyone on the path could have sent it)")

// Provider writes and reads the records of a zone on a DNS server that
// takes TSIG-signed dynamic updates.
type Provider struct {
	// Server is the primary server of the zone, which takes the updates:
	// `host:port`, or `host` for port 53. Example: `ns1.example.net:53`.
	// Required.
	Server string `json:"server,omitempty"`

	// KeyName is the name of the TSIG key the server knows, as in its
	// configuration (`key "caddy" { ... }` in BIND). Example: `caddy`.
	// Required.
	KeyName string `json:"key_name,omitempty"`

	// Key is the TSIG key's secret, base64 as in the server's
	// configuration (`secret "..."` in BIND, `tsig-keygen` prints it).
	// Use a placeholder such as `{env.DNS_TSIG_KEY}` rather than the key
	// itself in a config file. Required.
	Key string `json:"key,omitempty"`

	// Algorithm is the TSIG key's algorithm: hmac-sha256, hmac-sha384,
	// hmac-sha512, hmac-sha224 or hmac-sha1. Default: hmac-sha256.
	Algorithm string `json:"algorithm,omitempty"`

	// Timeout bounds one exchange with the server (an update, a zone
	// transfer from its first byte to its last, however the server paces
	// it): raise it for a large zone read over a slow link. Default: 10s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// MaxTransferRecords bounds the records one zone transfer (a read of
	// the zone) may hold: past it the transfer stops, its connection is
	// closed and the read fails with an error naming this setting; nothing
	// of it is kept. Default: 100000.
	MaxTransferRecords int `json:"max_transfer_records,omitempty"`

	// MaxTransferBytes bounds the bytes one zone transfer may take from
	// the server, as MaxTransferRecords. In the Caddyfile a number of
	// bytes, or with KiB, MiB or GiB: `64MiB`. Default: 32 MiB
	// (33554432).
	MaxTransferBytes int64 `json:"max_transfer_bytes,omitempty"`

	keyFQDN string
	alg     string
	secret  string
}

// CaddyModule returns the Caddy module information.
func (Provider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "dns.providers.rfc2136",
		New: func() caddy.Module { return new(Provider) },
	}
}

// Provision replaces placeholders in the settings and checks them.
func (p *Provider) Provision(caddy.Context) error {
	repl := caddy.NewReplacer()
	p.Server = repl.ReplaceAll(p.Server, "")
	p.KeyName = repl.ReplaceAll(p.KeyName, "")
	p.Key = repl.ReplaceAll(p.Key, "")
	return p.settle()
}

// settle checks the settings and works out the key as miekg/dns wants it.
func (p *Provider) settle() error {
	if p.Server == "" {
		return setting.Errorf("server", "wants the zone's primary server, host:port (e.g. ns1.example.net:53)")
	}
	if _, _, err := net.SplitHostPort(p.Server); err != nil {
		p.Server = net.JoinHostPort(strings.Trim(p.Server, "[]"), "53")
	}
	if p.KeyName == "" {
		return setting.Errorf("key_name", "wants the name of the TSIG key the server knows")
	}
	if _, ok := dns.IsDomainName(p.KeyName); !ok {
		return setting.Errorf("key_name", "%q is not a key name", p.KeyName)
	}
	raw, err := base64.StdEncoding.DecodeString(p.Key)
	if err != nil || len(raw) == 0 {
		return setting.Errorf("key", "wants the TSIG secret in base64, as tsig-keygen prints it")
	}
	alg := p.Algorithm
	if alg == "" {
		alg = DefaultAlgorithm
	}
	known := map[string]string{
		"hmac-sha1": dns.HmacSHA1, "hmac-sha224": dns.HmacSHA224, "hmac-sha256": dns.HmacSHA256,
		"hmac-sha384": dns.HmacSHA384, "hmac-sha512": dns.HmacSHA512,
	}
	p.alg = known[strings.ToLower(strings.TrimSuffix(alg, "."))]
	if p.alg == "" {
		return setting.Errorf("algorithm", "%q is not one of hmac-sha256, hmac-sha384, hmac-sha512, hmac-sha224, hmac-sha1", alg)
	}
	if p.MaxTransferRecords < 0 {
		return setting.Errorf("max_transfer_records", "%d: wants a positive number of records", p.MaxTransferRecords)
	}
	if p.MaxTransferBytes < 0 {
		return setting.Errorf("max_transfer_bytes", "%d: wants a positive number of bytes", p.MaxTransferBytes)
	}
	p.keyFQDN = dns.Fqdn(strings.ToLower(p.KeyName))
	p.secret = p.Key
	return nil
}

func (p *Provider) timeout() time.Duration {
	if p.Timeout > 0 {
		return time.Duration(p.Timeout)
	}
	return defaultTimeout
}

// ready settles a Provider made in Go rather than by Caddy.
func (p *Provider) ready() error {
	if p.alg == "" {
		return p.settle()
	}
	return nil
}

// GetRecords returns the records of zone by a TSIG-signed zone transfer
// (AXFR over TCP): the server must allow the key to transfer the zone
// (`allow-transfer { key caddy; };` in BIND). The SOA and DNSSEC records
// are left out. Every message of the answer must carry a valid TSIG of
// the key. A transfer past max_transfer_records or max_transfer_bytes
// fails (ErrTransferTooLarge) and keeps nothing, as does one that takes
// longer than timeout as a whole; a canceled ctx closes the connection
// at once.
func (p *Provider) GetRecords(ctx context.Context, zone string) ([]libdns.Record, error) {
	if err := p.ready(); err != nil {
		return nil, err
	}
	zone = dns.Fqdn(zone)
	fail := func(err error) ([]libdns.Record, error) {
		return nil, fmt.Errorf("zone transfer of %s from %s: %w", zone, p.Server, err)
	}
	// The transfer as a whole within timeout: each read has its own
	// deadline too, but a server sending one small message just within
	// it would otherwise keep the transfer going for as long as it likes.
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	ctxErr := func() error {
		if caller.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("longer than the timeout of %v (timeout of the rfc2136 provider): %w", p.timeout(), ctx.Err())
		}
		return ctx.Err()
	}
	m := new(dns.Msg)
	m.SetAxfr(zone)
	m.SetTsig(p.keyFQDN, p.alg, 300, time.Now().Unix())
	nc, stop, err := p.dial(ctx)
	if err != nil {
		return fail(err)
	}
	defer stop()
	maxRecords, maxBytes := p.maxTransfer()
	counted := &countingConn{Conn: nc, max: maxBytes}
	t := &dns.Transfer{
		Conn:        &dns.Conn{Conn: counted},
		DialTimeout: p.timeout(), ReadTimeout: p.timeout(), WriteTimeout: p.timeout(),
		TsigSecret: map[string]string{p.keyFQDN: p.secret},
	}
	_ = nc.SetWriteDeadline(time.Now().Add(p.timeout()))
	envs, err := t.In(m, p.Server)
	if err != nil {
		return fail(err)
	}
	// The transfer's goroutine ends once the connection is closed: drain
	// it before returning, so that nothing of it outlives the call.
	defer func() {
		_ = nc.Close()
		for range envs {
		}
	}()
	var out []libdns.Record
	n := 0
	for env := range envs {
		if env.Error != nil {
			switch {
			case ctx.Err() != nil:
				return fail(ctxErr())
			case counted.over():
				return fail(fmt.Errorf("%w: more than %d bytes (max_transfer_bytes of the rfc2136 provider)", ErrTransferTooLarge, maxBytes))
			}
			return fail(env.Error)
		}
		for _, rr := range env.RR {
			t := rr.Header().Rrtype
			if t == dns.TypeSOA {
				continue // the transfer's first and last
			}
			if n++; n > maxRecords {
				return fail(fmt.Errorf("%w: more than %d records (max_transfer_records of the rfc2136 provider)", ErrTransferTooLarge, maxRecords))
			}
			switch t {
			case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeDNSKEY, dns.TypeNSEC3PARAM:
				continue
			}
			out = append(out, fromRR(rr, zone))
		}
	}
	if ctx.Err() != nil {
		return fail(ctxErr())
	}
	return out, nil
}

// maxTransfer is the records and bytes one zone transfer may take.
func (p *Provider) maxTransfer() (int, int64) {
	records, bytes := p.MaxTransferRecords, p.MaxTransferBytes
	if records <= 0 {
		records = DefaultMaxTransferRecords
	}
	if bytes <= 0 {
		bytes = DefaultMaxTransferBytes
	}
	return records, bytes
}

// dial connects to the server over TCP within the timeout, and closes
// the connection as soon as ctx is canceled, whatever reads or writes
// are under way; stop ends that watch and closes the connection.
func (p *Provider) dial(ctx context.Context) (net.Conn, func(), error) {
	d := net.Dialer{Timeout: p.timeout()}
	nc, err := d.DialContext(ctx, "tcp", p.Server)
	if err != nil {
		return nil, nil, err
	}
	unwatch := context.AfterFunc(ctx, func() { _ = nc.Close() })
	return nc, func() { unwatch(); _ = nc.Close() }, nil
}

// countingConn fails the reads of a connection past max bytes.
type countingConn struct {
	net.Conn
	max, read int64
	tooMuch   bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	if c.read >= c.max {
		c.tooMuch = true
		return 0, ErrTransferTooLarge
	}
	if rest := c.max - c.read; int64(len(b)) > rest {
		b = b[:rest+1] // one byte past the cap tells a larger transfer from one of exactly max
	}
	n, err := c.Conn.Read(b)
	c.read += int64(n)
	if c.read > c.max {
		c.tooMuch = true
		return 0, ErrTransferTooLarge
	}
	return n, err
}

// over reports whether the reads went past the cap. Read by the caller
// after the transfer's goroutine reported its error, so not concurrently.
func (c *countingConn) over() bool { return c.tooMuch }

// AppendRecords adds recs to zone in one update, which the server applies
// whole or not at all. It changes no record that is there.
func (p *Provider) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	rrs, err := p.toRRs(zone, recs)
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	m.SetUpdate(dns.Fqdn(zone))
	m.Insert(rrs)
	if err := p.exchange(ctx, m); err != nil {
		return nil, err
	}
	return typed(recs), nil
}

// DeleteRecords removes recs from zone in one update. A record with an
// empty value removes every record of its name and type; with no type
// either, every record of its name.
func (p *Provider) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	if err := p.ready(); err != nil {
		return nil, err
	}
	fqZone := dns.Fqdn(zone)
	m := new(dns.Msg)
	m.SetUpdate(fqZone)
	for _, r := range recs {
		rr := r.RR()
		name := libdns.AbsoluteName(rr.Name, fqZone)
		switch {
		case rr.Type == "":
			m.RemoveName([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeANY, Class: dns.ClassINET}}})
		case rr.Data == "":
			t, ok := dns.StringToType[strings.ToUpper(rr.Type)]
			if !ok {
				return nil, fmt.Errorf("record type %q unknown", rr.Type)
			}
			m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET}}})
		default:
			one, err := toRR(r, fqZone)
			if err != nil {
				return nil, err
			}
			m.Remove([]dns.RR{one})
		}
	}
	if err := p.exchange(ctx, m); err != nil {
		return nil, err
	}
	return typed(recs), nil
}

// exchange sends the signed update m over TCP and checks the answer,
// which must carry a valid TSIG of the key: an unsigned answer, or one
// signed otherwise, is an error whatever it says. A canceled ctx closes
// the connection at once.
func (p *Provider) exchange(ctx context.Context, m *dns.Msg) error {
	if err := p.ready(); err != nil {
		return err
	}
	m.SetTsig(p.keyFQDN, p.alg, 300, time.Now().Unix())
	fail := func(err error) error {
		return fmt.Errorf("DNS update of %s at %s: %w", m.Question[0].Name, p.Server, err)
	}
	nc, stop, err := p.dial(ctx)
	if err != nil {
		return fail(err)
	}
	defer stop()
	c := &dns.Client{Net: "tcp", Timeout: p.timeout(), TsigSecret: map[string]string{p.keyFQDN: p.secret}}
	// dns.Conn.ReadMsg checks the answer's TSIG only when there is one.
	in, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: nc})
	if err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(err)
	}
	if ts := in.IsTsig(); ts == nil || !strings.EqualFold(ts.Hdr.Name, p.keyFQDN) {
		return fail(errUnsigned)
	}
	if in.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("DNS update of %s at %s: the server answered %s", m.Question[0].Name, p.Server, dns.RcodeToString[in.Rcode])
	}
	return nil
}

// toRRs converts recs, each named relative to zone, to DNS records.
func (p *Provider) toRRs(zone string, recs []libdns.Record) ([]dns.RR, error) {
	if err := p.ready(); err != nil {
		return nil, err
	}
	out := make([]dns.RR, 0, len(recs))
	for _, r := range recs {
		rr, err := toRR(r, dns.Fqdn(zone))
		if err != nil {
			return nil, err
		}
		out = append(out, rr)
	}
	return out, nil
}

// toRR converts a libdns record, named relative to zone, to a DNS record.
func toRR(r libdns.Record, zone string) (dns.RR, error) {
	rr := r.RR()
	hdr := dns.RR_Header{Name: libdns.AbsoluteName(rr.Name, zone), Class: dns.ClassINET, Ttl: uint32(rr.TTL / time.Second)}
	switch v := r.(type) {
	case libdns.Address:
		if v.IP.Is4() {
			hdr.Rrtype = dns.TypeA
			return &dns.A{Hdr: hdr, A: v.IP.AsSlice()}, nil
		}
		hdr.Rrtype = dns.TypeAAAA
		return &dns.AAAA{Hdr: hdr, AAAA: v.IP.AsSlice()}, nil
	case libdns.CNAME:
		hdr.Rrtype = dns.TypeCNAME
		return &dns.CNAME{Hdr: hdr, Target: dns.Fqdn(v.Target)}, nil
	case libdns.TXT:
		hdr.Rrtype = dns.TypeTXT
		return &dns.TXT{Hdr: hdr, Txt: chunks(v.Text)}, nil
	}
	if parsed, err := rr.Parse(); err == nil {
		switch parsed.(type) {
		case libdns.Address, libdns.CNAME, libdns.TXT:
			return toRR(parsed, zone) // an RR of a type above, typed
		}
	}
	line := fmt.Sprintf("%s %d IN %s %s", hdr.Name, hdr.Ttl, rr.Type, rr.Data)
	out, err := dns.NewRR(line)
	if err != nil {
		return nil, fmt.Errorf("record %s %s: %w", rr.Name, rr.Type, err)
	}
	if out == nil {
		return nil, errors.New("record " + rr.Name + ": empty")
	}
	return out, nil
}

// chunks splits a TXT value into the strings of at most 255 bytes a TXT
// record holds.
func chunks(s string) []string {
	var out []string
	for len(s) > 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

// fromRR converts a DNS record of zone to the libdns type of its kind.
func fromRR(rr dns.RR, zone string) libdns.Record {
	h := rr.Header()
	name := libdns.RelativeName(h.Name, zone)
	ttl := time.Duration(h.Ttl) * time.Second
	switch v := rr.(type) {
	case *dns.A:
		ip, _ := netip.AddrFromSlice(v.A.To4())
		return libdns.Address{Name: name, TTL: ttl, IP: ip}
	case *dns.AAAA:
		ip, _ := netip.AddrFromSlice(v.AAAA)
		return libdns.Address{Name: name, TTL: ttl, IP: ip}
	case *dns.CNAME:
		return libdns.CNAME{Name: name, TTL: ttl, Target: v.Target}
	case *dns.TXT:
		return libdns.TXT{Name: name, TTL: ttl, Text: strings.Join(v.Txt, "")}
	}
	data := strings.TrimPrefix(rr.String(), h.String())
	return libdns.RR{Name: name, TTL: ttl, Type: dns.TypeToString[h.Rrtype], Data: data}
}

// typed returns recs as the libdns types of their kinds.
func typed(recs []libdns.Record) []libdns.Record {
	out := make([]libdns.Record, 0, len(recs))
	for _, r := range recs {
		if p, err := r.RR().Parse(); err == nil {
			out = append(out, p)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// UnmarshalCaddyfile sets up the provider from Caddyfile tokens:
//
//	rfc2136 {
//		server    <host:port>
//		key_name  <name>
//		key       <base64 secret>
//		algorithm hmac-sha256|hmac-sha384|hmac-sha512|hmac-sha224|hmac-sha1
//		timeout   <duration>
//		max_transfer_records <n>
//		max_transfer_bytes   <size>
//	}
func (p *Provider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		var value string
		if !d.AllArgs(&value) {
			return d.ArgErr()
		}
		switch name {
		case "server":
			p.Server = value
		case "key_name":
			p.KeyName = value
		case "key":
			p.Key = value
		case "algorithm":
			p.Algorithm = value
		case "timeout":
			dur, err := caddy.ParseDuration(value)
			if err != nil || dur <= 0 {
				return d.Errf("timeout: %q is not a positive duration (e.g. 10s)", value)
			}
			p.Timeout = caddy.Duration(dur)
		case "max_transfer_records":
			n, err := strconv.Atoi(value)
			if err != nil || n <= 0 {
				return d.Errf("max_transfer_records: %q is not a positive whole number", value)
			}
			p.MaxTransferRecords = n
		case "max_transfer_bytes":
			n, err := parseSize(value)
			if err != nil {
				return d.Errf("max_transfer_bytes: %v", err)
			}
			p.MaxTransferBytes = n
		default:
			return d.Errf("unrecognized rfc2136 setting '%s'", name)
		}
	}
	return nil
}

// parseSize reads a positive size: a number of bytes, or with KiB, MiB
// or GiB after it.
func parseSize(raw string) (int64, error) {
	num, unit := raw, int64(1)
	for suffix, u := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(raw, suffix); ok {
			num, unit = n, u
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is not a positive size (e.g. 33554432 or 32MiB)", raw)
	}
	return n * unit, nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Provider)(nil)
	_ caddyfile.Unmarshaler = (*Provider)(nil)
	_ libdns.RecordGetter   = (*Provider)(nil)
	_ libdns.RecordAppender = (*Provider)(nil)
	_ libdns.RecordDeleter  = (*Provider)(nil)
)
