package caddydicer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
	"github.com/caddy-dicer/caddy-dicer/modules/preobtain"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// hostPermission is R7 whatever the daemon: a certificate only for a host
// that some instance claims, narrowed by the settings below (R7a).
type hostPermission struct {
	// AllowSuffix limits certificates to names under these domains,
	// whatever the instances' labels claim. A domain counts as under
	// itself: `example.com` allows `example.com`, `shop.example.com` and
	// `a.b.example.com`, not `badexample.com`. Example: `["apps.example.com",
	// "example.net"]`. Default: none, any name an instance claims.
	AllowSuffix []string `json:"allow_suffix,omitempty"`

	// Selector limits the instances that can claim names to those whose
	// labels match it, in the syntax of the upstream source's selector: an
	// instance outside it gets no certificate, and a name it lists exactly
	// is refused even to wildcards inside it, since requests for that name
	// go to it (R2a). Example: `caddy.tenant=trusted`. Default: none, every
	// instance may claim names.
	Selector string `json:"selector,omitempty"`

	// Wildcards says whether a name that only a wildcard `caddy.host`
	// pattern (`*.example.com`) claims gets a certificate: `allow` or
	// `refuse`. A wildcard matches any name a scanner sends, and each
	// would be a certificate, counted against the CA's rate limit for the
	// registered domain. Default: `refuse`.
	Wildcards string `json:"wildcards,omitempty"`

	// ObtainOnClaim has Caddy obtain the certificate for a host as soon
	// as an instance first claims it (and the settings above allow it),
	// instead of at the first TLS handshake for it, so that the first
	// visitor does not wait for the CA (R7b). It goes through Caddy's
	// certificate management as that handshake would: the on_demand_tls
	// permission is asked, a certificate in storage is loaded, not
	// ordered. Only hosts listed exactly, never a wildcard pattern; one
	// at a time, at most one a second, at most 256 waiting. Renewal stays
	// on demand: a host that lost its last claim is not renewed (R7c).
	// Example: `true`. Default: false, a certificate at the first
	// handshake.
	ObtainOnClaim bool `json:"obtain_on_claim,omitempty"`

	// DNSRecords, when set, publishes a DNS record for each host the
	// permission allows, pointing at this Caddy (R7e, permission_dns.go,
	// docs/dns-records.md). Default: none, no record is written.
	DNSRecords *DNSRecords `json:"dns_records,omitempty"`

	// issuanceBudget holds max_orders_per_domain, max_orders_per_instance
	// and obtain_timeout (R7d, permission_budget.go).
	issuanceBudget

	key            string
	conn           *connection.Conn
	decisions      connection.DecisionCounters
	logger         *zap.Logger
	suffixes       []string
	sel            *selector.Selector
	allowWildcards bool
	obtainer       *preobtain.Obtainer
}

// The refusals, made once: a scanner's flood of handshakes for names
// nobody claims must cost no allocation. Each wraps
// caddytls.ErrPermissionDenied, so Caddy logs it at debug level with the
// name.
var (
	errNotUnderSuffix = fmt.Errorf("%w: name is not under any allow_suffix domain", caddytls.ErrPermissionDenied)
	errNotClaimed     = fmt.Errorf("%w: no instance lists the name in its caddy.host label (none the selector matches, with one)", caddytls.ErrPermissionDenied)
	errOnlyWildcard   = fmt.Errorf("%w: only a caddy.host wildcard claims the name, and wildcards are refused (wildcards allow grants them)", caddytls.ErrPermissionDenied)
	errUnderscore     = fmt.Errorf("%w: a label of the name starts with '_' (such names hold a domain's ACME challenges, DKIM keys and service records)", caddytls.ErrPermissionDenied)
)

// provision checks the settings and joins the daemon's shared connection.
func (p *hostPermission) provision(ctx caddy.Context, daemon daemonSettings) error {
	if err := p.settle(); err != nil {
		return err
	}
	p.logger = ctx.Logger()
	var err error
	if p.conn, p.key, err = open(daemon); err != nil {
		return err
	}
	dicerapp.RegisterMetrics(ctx, instanceSeries)
	p.decisions = p.conn.Decisions()
	p.setStorage(ctx.Storage())
	p.conn.AddPermission(p)
	if err := await(ctx, p.conn); err != nil {
		return err
	}
	if p.ObtainOnClaim {
		p.obtainer = preobtain.New(ctx, obtainPerm{p}, p.logger)
		p.obtainer.Start()
	}
	return p.provisionDNS(ctx)
}

// settle checks the permission's own settings and works out what
// CertificateAllowed needs from them.
func (p *hostPermission) settle() error {
	p.suffixes = p.suffixes[:0]
	for _, s := range p.AllowSuffix {
		d, err := allowedSuffix(s)
		if err != nil {
			return err
		}
		p.suffixes = append(p.suffixes, d)
	}
	sel, err := selector.Parse(p.Selector)
	if err != nil {
		return err // a SyntaxError names the selector
	}
	p.sel = nil
	if !sel.Empty() {
		p.sel = &sel
	}
	if err := p.settleBudget(); err != nil {
		return err
	}
	switch p.Wildcards {
	case "", "refuse":
		p.allowWildcards = false
	case "allow":
		p.allowWildcards = true
	default:
		return setting.Errorf("wildcards", "%q is neither allow nor refuse", p.Wildcards)
	}
	return nil
}

// allowedSuffix checks and normalizes an allow_suffix domain.
func allowedSuffix(raw string) (string, error) {
	d := catalog.NormalizeName(strings.TrimSpace(raw))
	if d == "" || d != strings.ToLower(strings.TrimSuffix(strings.TrimSpace(raw), ".")) ||
		strings.ContainsAny(d, "*/ ,[]") || strings.HasPrefix(d, ".") || strings.Contains(d, "..") {
		return "", setting.Errorf("allow_suffix", "%q is not a domain name (e.g. example.com)", raw)
	}
	return d, nil
}

// CertificateAllowed implements caddytls.OnDemandPermission: allowed only
// for a name under allow_suffix (if set) that an instance matching
// selector (if set) claims (R7), through a wildcard only with `wildcards
// allow` (R7a). The name is read as a request's Host is (R2b): a trailing
// dot is not dropped, so "shop.example.com." is not claimed by a label
// listing shop.example.com. An allowed or refused name costs index
// lookups and no allocation.
func (p *hostPermission) CertificateAllowed(ctx context.Context, name string) error {
	host := catalog.NormalizeHost(name)
	err := p.Decide(host)
	if err == nil {
		err = p.charge(ctx, host) // R7d
	}
	p.decisions.Count(err == nil)
	if err != nil {
		return p.refuse(host, err)
	}
	return nil
}

// decide is CertificateAllowed for a normalized host, neither counted nor
// logged: the admin API's explain asks it too.
func (p *hostPermission) Decide(host string) error {
	if catalog.UnderscoreLabel(host) {
		return errUnderscore // R7: whatever claims it, wildcards included
	}
	if len(p.suffixes) > 0 && !underAny(host, p.suffixes) {
		return errNotUnderSuffix
	}
	switch p.conn.Catalog().Snapshot().ClaimOf(host, p.sel) {
	case catalog.ClaimedExactly:
		return nil
	case catalog.ClaimedByWildcard:
		if p.allowWildcards {
			return nil
		}
		return errOnlyWildcard
	}
	return errNotClaimed
}

// refuse returns err, logging the name at debug level only: at info, a
// scanner would write a line per handshake.
func (p *hostPermission) refuse(host string, err error) error {
	if ce := p.logger.Check(zapcore.DebugLevel, "on-demand certificate refused"); ce != nil {
		ce.Write(zap.String("name", host), zap.Error(err))
	}
	return err
}

// underAny reports whether host is one of domains or ends in "." plus one.
func underAny(host string, domains []string) bool {
	for _, d := range domains {
		if host == d || len(host) > len(d) && host[len(host)-len(d)-1] == '.' && host[len(host)-len(d):] == d {
			return true
		}
	}
	return false
}

// Cleanup releases the shared connection.
func (p *hostPermission) Cleanup() error {
	p.cleanupDNS()
	if p.obtainer != nil {
		p.obtainer.Stop()
		p.obtainer = nil
	}
	if p.key != "" {
		p.conn.RemovePermission(p)
	}
	dicerapp.Release(p.key)
	p.key = ""
	return nil
}

func (p *hostPermission) unmarshal(d *caddyfile.Dispenser, name string, daemon daemonSettings) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		ok, err := unmarshalDaemonSetting(d, daemon, seen)
		if !ok && err == nil {
			ok, err = p.unmarshalSetting(d, seen)
		}
		if !ok && err == nil {
			ok, err = p.unmarshalBudget(d, seen)
		}
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized %s permission setting '%s'", name, d.Val())
		}
	}
	if err := p.settle(); err != nil {
		return blame(d, err)
	}
	if err := daemon.validateStatic(); err != nil {
		return blame(d, err)
	}
	return nil
}

// unmarshalSetting parses one of the permission's own settings, if the
// dispenser is at one.
func (p *hostPermission) unmarshalSetting(d *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	setting, ok, err := settingAt(d, seen, "allow_suffix", "selector", "wildcards", "obtain_on_claim", "dns_records")
	if !ok || err != nil {
		return ok, err
	}
	switch setting {
	case "dns_records":
		p.DNSRecords, err = unmarshalDNSRecords(d)
		return true, err
	case "allow_suffix":
		p.AllowSuffix = d.RemainingArgs()
		if len(p.AllowSuffix) == 0 {
			return true, settingErrf(d, "allow_suffix", "wants one or more domains")
		}
		for _, s := range p.AllowSuffix {
			if _, err := allowedSuffix(s); err != nil {
				return true, d.WrapErr(err)
			}
		}
	case "selector":
		if err := oneValue(d, &p.Selector); err != nil {
			return true, err
		}
		if _, err := selector.Parse(p.Selector); err != nil {
			return true, d.WrapErr(err) // a SyntaxError names the selector
		}
	case "obtain_on_claim":
		if d.NextArg() {
			return true, settingErrf(d, "obtain_on_claim", "takes no value")
		}
		p.ObtainOnClaim = true
	default:
		if err := oneValue(d, &p.Wildcards); err != nil {
			return true, err
		}
		if p.Wildcards != "allow" && p.Wildcards != "refuse" {
			return true, settingErrf(d, "wildcards", "%q is neither allow nor refuse", p.Wildcards)
		}
	}
	return true, nil
}

// obtainPerm is the permission as its obtain_on_claim obtainer sees it
// (package obtain, R7b).
type obtainPerm struct{ p *hostPermission }

func (o obtainPerm) Snapshot() *catalog.Snapshot  { return o.p.conn.Catalog().Snapshot() }
func (o obtainPerm) Decide(host string) error     { return o.p.Decide(host) }
func (o obtainPerm) ObtainTimeout() time.Duration { return o.p.obtainTimeout() }

var _ preobtain.Permission = obtainPerm{}

// FollowsDaemon marks a permission that follows one daemon: every list of
// backends the plugin shows reads them by it from Caddy's module registry
// (adminapi.Backends).
func (*hostPermission) FollowsDaemon() {}
