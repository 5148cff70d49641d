package caddydicer

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/budget"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// Issuance budgets (R7d): how many new certificate orders the permission
// lets one registered domain and one claiming instance start per hour,
// decided in memory before Caddy calls any CA. Caddy itself has none
// (caddy#5955, caddy#6611); one tenant's names could otherwise spend the
// ACME account's rate limits that every tenant shares.

const (
	// defaultOrdersPerDomain and defaultOrdersPerInstance are the
	// budgets' defaults, per hour.
	defaultOrdersPerDomain   = 20
	defaultOrdersPerInstance = 10
	// defaultObtainTimeout bounds one obtain of obtain_on_claim.
	defaultObtainTimeout = 2 * time.Minute
)

// issuanceBudget holds the permission's budget settings.
type issuanceBudget struct {
	// MaxOrdersPerDomain is how many certificates for new names under one
	// registered domain (its public suffix plus one label:
	// `example.co.uk` for `shop.example.co.uk`) the permission allows per
	// hour, for the first handshakes and obtain_on_claim alike (R7d). A
	// name allowed once is free again within the hour; a certificate
	// already in Caddy's storage is not counted. One more is refused until
	// the hour frees one, with a metric and one log line. `0`: no limit.
	// Default: `20` (Let's Encrypt allows 50 a week per registered domain).
	MaxOrdersPerDomain *int `json:"max_orders_per_domain,omitempty"`

	// MaxOrdersPerInstance is the same budget per claiming instance: how
	// many new names one instance's `caddy.host` may get certificates for
	// per hour, whatever their domains. `0`: no limit. Default: `10`.
	MaxOrdersPerInstance *int `json:"max_orders_per_instance,omitempty"`

	// ObtainTimeout bounds how long obtain_on_claim waits for one
	// certificate before it goes on to the next host (the order itself
	// goes on, under certmagic's own bounds; the host backs off as after
	// a failure). Example: `5m`. Default: `2m`.
	ObtainTimeout caddy.Duration `json:"obtain_timeout,omitempty"`

	storage certmagic.Storage
	issuers *issuerDirs // the issuers' folders of storage, listed once a minute
}

// setStorage sets the storage the budget looks for certificates in
// (Caddy's), with a fresh memory of its issuers' folders.
func (b *issuanceBudget) setStorage(s certmagic.Storage) {
	b.storage, b.issuers = s, &issuerDirs{}
}

// limits are the budgets, their defaults applied.
func (b *issuanceBudget) limits() budget.Limits {
	lim := budget.Limits{PerDomain: defaultOrdersPerDomain, PerInstance: defaultOrdersPerInstance}
	if b.MaxOrdersPerDomain != nil {
		lim.PerDomain = *b.MaxOrdersPerDomain
	}
	if b.MaxOrdersPerInstance != nil {
		lim.PerInstance = *b.MaxOrdersPerInstance
	}
	return lim
}

// settleBudget checks the budget settings.
func (b *issuanceBudget) settleBudget() error {
	for name, v := range map[string]*int{"max_orders_per_domain": b.MaxOrdersPerDomain, "max_orders_per_instance": b.MaxOrdersPerInstance} {
		if v != nil && *v < 0 {
			return setting.Errorf(name, "%d is negative", *v)
		}
	}
	if b.ObtainTimeout < 0 {
		return setting.Errorf("obtain_timeout", "%s is negative", time.Duration(b.ObtainTimeout))
	}
	return nil
}

// obtainTimeout is obtain_timeout, its default applied.
func (b *issuanceBudget) obtainTimeout() time.Duration {
	if b.ObtainTimeout == 0 {
		return defaultObtainTimeout
	}
	return time.Duration(b.ObtainTimeout)
}

// unmarshalBudget parses one budget setting, if the dispenser is at one.
func (b *issuanceBudget) unmarshalBudget(d *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	name, ok, err := settingAt(d, seen, "max_orders_per_domain", "max_orders_per_instance", "obtain_timeout")
	if !ok || err != nil {
		return ok, err
	}
	var raw string
	if err := oneValue(d, &raw); err != nil {
		return true, err
	}
	if name == "obtain_timeout" {
		dur, err := time.ParseDuration(raw)
		if err != nil || dur <= 0 {
			return true, settingErrf(d, name, "%q is not a positive duration (e.g. 2m)", raw)
		}
		b.ObtainTimeout = caddy.Duration(dur)
		return true, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return true, settingErrf(d, name, "%q is not a whole number (0: no limit)", raw)
	}
	if name == "max_orders_per_domain" {
		b.MaxOrdersPerDomain = &n
	} else {
		b.MaxOrdersPerInstance = &n
	}
	return true, nil
}

// The refusals by budget, made once; each wraps
// caddytls.ErrPermissionDenied.
var errBudget = map[string]error{
	budget.Domain:   fmt.Errorf("%w: max_orders_per_domain spent for the name's registered domain this hour", caddytls.ErrPermissionDenied),
	budget.Instance: fmt.Errorf("%w: max_orders_per_instance spent for the instance claiming the name this hour", caddytls.ErrPermissionDenied),
	budget.Names:    fmt.Errorf("%w: %d certificate orders this hour already", caddytls.ErrPermissionDenied, budget.MaxNames),
}

// charge charges a new order of host, allowed otherwise, to the budgets
// (R7d): nil if they allow it (or it is in storage already), else the
// refusal, counted and logged once per spent budget an hour.
func (p *hostPermission) charge(ctx context.Context, host string) error {
	lim := p.limits()
	if lim == (budget.Limits{}) {
		return nil
	}
	orders := p.conn.Orders()
	if orders.Charged(host) {
		return nil
	}
	// A name refused within the last minute was looked for in storage
	// then: its repeats (a client's retries, a scanner's) cost no storage
	// call.
	now := time.Now()
	if !orders.Refused(host, now) && p.stored(ctx, host) {
		return nil
	}
	// Charged to a claimant with room: another instance listing the name
	// cannot spend its owner's budget.
	r := orders.ChargeAny(host, p.conn.Catalog().Snapshot().ClaimantsOf(nil, host), lim, now)
	if r.Budget == "" {
		return nil
	}
	p.conn.BudgetRefused(r.Budget).Inc()
	if r.First {
		p.logger.Warn("on-demand certificate refused: an issuance budget is spent for this hour (R7d)",
			zap.String("name", host), zap.String("budget", r.Budget), zap.String("of", r.Key),
			zap.Int("max_orders_per_domain", lim.PerDomain), zap.Int("max_orders_per_instance", lim.PerInstance))
	}
	return errBudget[r.Budget]
}

// stored reports whether Caddy's storage holds a certificate for host
// from any issuer: loading it is no order, and is not charged. It asks
// for the certificate under each issuer's folder (listed at most once a
// minute, issuerDirs): one storage call per issuer, made once per name
// allowed and once a minute per name refused (budget.RefusalMemory).
func (p *hostPermission) stored(ctx context.Context, host string) bool {
	if p.storage == nil {
		return false
	}
	for _, dir := range p.issuers.list(ctx, p.storage, time.Now()) {
		if p.storage.Exists(ctx, certmagic.StorageKeys.SiteCert(path.Base(dir), host)) {
			return true
		}
	}
	return false
}

// issuersMemory is how long the issuers' folders in storage, once listed,
// are used without listing them again.
const issuersMemory = time.Minute

// issuerDirs remembers the issuers' folders of Caddy's storage
// (certificates/<issuer>) for issuersMemory: a name not seen before (an
// outsider's handshakes for ever new names under a claimed wildcard) costs
// one Exists per issuer, not a listing too, which on a storage whose List
// reads every key under the prefix (Consul's, some Redis ones) read every
// certificate. A listing that failed or found none is not remembered. A
// nil *issuerDirs remembers nothing.
type issuerDirs struct {
	mu   sync.Mutex // held while listing: concurrent handshakes list once
	dirs []string
	at   time.Time
}

// list is the issuers' folders of storage, listed at most once per
// issuersMemory.
func (d *issuerDirs) list(ctx context.Context, storage certmagic.Storage, now time.Time) []string {
	if d == nil {
		dirs, _ := storage.List(ctx, certmagic.StorageKeys.CertsPrefix(""), false)
		return dirs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.dirs) > 0 && now.Sub(d.at) >= 0 && now.Sub(d.at) < issuersMemory {
		return d.dirs
	}
	dirs, err := storage.List(ctx, certmagic.StorageKeys.CertsPrefix(""), false)
	if err != nil {
		return nil
	}
	d.dirs, d.at = dirs, now
	return dirs
}
