// Package dnsrecords publishes DNS records for the hosts instances claim
// (R7e): for each host in a daemon's catalog that its on-demand TLS
// permission allows and that lies in a configured zone, an A/AAAA (or
// CNAME) record pointing at this Caddy, written through any libdns
// provider, next to an owner TXT record that marks it as written by
// caddy-dicer; and their removal once no instance has claimed the host for
// a grace period. A record without the owner TXT is never changed.
//
// It does not import Caddy: the permission modules (permission_dns.go)
// give it the provider, the storage lock and the permission's decision.
package dnsrecords

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libdns/libdns"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Defaults and bounds of a publisher (R7e).
const (
	DefaultTTL            = 60 * time.Second
	DefaultGrace          = 10 * time.Minute
	DefaultOwner          = "caddy-dicer"
	DefaultMaxPerInstance = 25
	DefaultMaxPerZone     = 1000

	// OwnerPrefix is the label in front of a host's name that holds its
	// owner TXT record: `_caddy-dicer.app.example.com`. A TXT beside the
	// host itself would be refused next to a CNAME.
	OwnerPrefix = "_caddy-dicer"

	// scanGap coalesces bursts of catalog changes.
	scanGap = 250 * time.Millisecond
	// resync is how often a zone is read again though nothing changed,
	// to see records removed or written by others.
	resync = 5 * time.Minute
	// A zone whose read or write failed is left for backoffMin, doubling
	// per failure up to backoffMax.
	backoffMin = time.Second
	backoffMax = 5 * time.Minute
	// maxWritesPerPass bounds the updates of one zone pass (the zone's
	// storage lock is held meanwhile); the rest go in the next pass.
	maxWritesPerPass = 50
	// callTimeout bounds one provider call.
	callTimeout = 30 * time.Second
)

// Provider is what a libdns provider module must do for a publisher.
type Provider interface {
	libdns.RecordGetter
	libdns.RecordAppender
	libdns.RecordDeleter
}

// Source is the permission a publisher works for.
type Source interface {
	// Snapshot is its daemon's catalog now.
	Snapshot() *catalog.Snapshot
	// Decide is its verdict on a normalized host, neither counted nor
	// logged: nil allows a certificate, and so a record.
	Decide(host string) error
}

// Locker is the lock of the storage a fleet of Caddys shares
// (certmagic.Locker): a zone's pass holds its lock, so that the Caddys of
// a fleet write each record once.
type Locker interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// Config is a publisher's settings, checked by the caller.
type Config struct {
	Provider Provider
	// Zones are the zones records are written in, normalized (lower case,
	// no trailing dot); a host goes in the longest zone it is under.
	Zones []string
	// Addresses are the A/AAAA targets, or CNAME the CNAME target: one of
	// the two.
	Addresses []netip.Addr
	CNAME     string
	TTL       time.Duration
	Grace     time.Duration
	// Owner tells this fleet's records from others' in the owner TXT.
	Owner          string
	MaxPerInstance int
	MaxPerZone     int
	// Locker is nil for a lone Caddy.
	Locker Locker
	Logger *zap.Logger
}

// Publisher keeps a zone's records in line with the claimed hosts.
type Publisher struct {
	cfg    Config
	src    Source
	logger *zap.Logger
	run    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
	zones  map[string]*zoneState // the worker's alone
	status atomic.Pointer[[]ZoneStatus]
	// now is the clock, replaced in tests.
	now func() time.Time
	// wake has the worker pass again at once (tests).
	wake chan struct{}
}

// zoneState is what a publisher knows of one zone.
type zoneState struct {
	name string
	// published holds the hosts whose records it saw written, ours.
	published map[string]bool
	// want holds the hosts to have records at last count, within the
	// caps, each with the instance claiming it.
	want map[string]string
	// gone holds the hosts with records of ours that no instance claims
	// (or that the caps no longer leave room for): since when, and who
	// claimed them last.
	gone map[string]graceHost
	// evict holds the hosts of gone the caps leave no room for at last
	// count: removed at the next write, before their grace period ends.
	evict map[string]bool
	// foreign holds the hosts with records that are not ours, logged once.
	foreign map[string]bool
	// refused holds the claimed hosts the caps left out at last count,
	// with the cap's setting, each counted once when it begins.
	refused  map[string]string
	synced   time.Time
	failures int
	retryAt  time.Time
	lastErr  string
}

// ZoneStatus is a zone's state, for the admin API and logs.
type ZoneStatus struct {
	Zone      string    `json:"zone"`
	Published int       `json:"published"`
	Pending   int       `json:"pending"`
	Gone      int       `json:"gone"`
	Foreign   int       `json:"foreign"`
	Dropped   int       `json:"dropped,omitempty"`
	Evicted   int       `json:"evicted,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	RetryAt   time.Time `json:"retry_at,omitzero"`
}

// New returns the publisher of src, not yet running.
func New(cfg Config, src Source) *Publisher {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	p := &Publisher{cfg: cfg, src: src, logger: cfg.Logger, now: time.Now, wake: make(chan struct{}, 1)}
	p.zones = make(map[string]*zoneState, len(cfg.Zones))
	for _, z := range cfg.Zones {
		p.zones[z] = &zoneState{name: z, published: map[string]bool{}, want: map[string]string{}, gone: map[string]graceHost{},
			evict: map[string]bool{}, foreign: map[string]bool{}, refused: map[string]string{}}
	}
	p.run, p.cancel = context.WithCancel(context.Background())
	return p
}

// Start runs the publisher until Stop.
func (p *Publisher) Start() {
	p.done.Add(1)
	go func() { defer p.done.Done(); p.loop() }()
}

// Stop ends the publisher and returns once it has; a provider call under
// way is canceled. Records stay: the next config's publisher, or the
// grace period of a later one, decides about them.
func (p *Publisher) Stop() {
	p.cancel()
	p.done.Wait()
}

// Status is each zone's state after the last pass.
func (p *Publisher) Status() []ZoneStatus {
	if s := p.status.Load(); s != nil {
		return *s
	}
	return nil
}

// loop passes over the zones after each catalog change, at each timer it
// set (a grace period ending, a backoff ending), and every resync.
func (p *Publisher) loop() {
	for {
		snap := p.src.Snapshot()
		next := p.pass(snap)
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(p.now()), scanGap))
			timer = t.C
		}
		select {
		case <-snap.Changed():
		case <-timer:
		case <-p.wake:
		case <-p.run.Done():
		}
		if t != nil {
			t.Stop()
		}
		if p.run.Err() != nil {
			return
		}
		select {
		case <-time.After(scanGap):
		case <-p.run.Done():
			return
		}
	}
}

// claim is a host some instance claims, in a zone.
type claim struct {
	host, zone string
	// claimants are the instances that claim it (index order); it is
	// charged to one with room under max_records_per_instance.
	claimants []string
	// held: the host has records of ours (published, or in its grace
	// period).
	held bool
}

// graceHost is a host with records of ours that no instance claims.
type graceHost struct {
	since time.Time
	// claimant is the instance that claimed it last, "" if none is known
	// (records found at a read).
	claimant string
}

// desired works out, per zone, the hosts to have records for within the
// caps (z.want), the hosts entering their grace period (z.gone), and
// those of z.gone the caps leave no room for (z.evict).
//
// Every host with records of ours counts against both caps, max_records
// per zone and max_records_per_instance, whether claimed or in its grace
// period (a grace host against the instance that claimed it last; a host
// several instances claim against one of them with room, the last it was
// charged to first), so that relabelling cannot grow the zone past them
// and another instance listing a host cannot spend its place (R7e): claimed hosts
// first (those with records before new ones, then by name, so that a cap
// does not flap), then the hosts in their grace period, the newest
// first; the grace hosts left over are removed at once, the oldest first,
// and a new claim that finds no room is refused (logged, counted in
// caddy_dicer_dns_records_refused_total) until there is.
func (p *Publisher) desired(snap *catalog.Snapshot, now time.Time) {
	var claims []claim
	snap.EachHostClaimants(func(host string, claimants []string) bool {
		if !validHost(host) || p.src.Decide(host) != nil {
			return true
		}
		zone := p.zoneOf(host)
		if zone == "" || (p.cfg.CNAME != "" && host == zone) {
			return true // a CNAME cannot sit at a zone's apex
		}
		z := p.zones[zone]
		_, inGrace := z.gone[host]
		claims = append(claims, claim{host: host, claimants: slices.Clone(claimants), zone: zone, held: z.published[host] || inGrace})
		return true
	})
	slices.SortFunc(claims, func(a, b claim) int {
		if a.held != b.held {
			if a.held {
				return -1
			}
			return 1
		}
		return strings.Compare(a.host, b.host)
	})
	perZone := map[string]int{}
	perInstance := map[string]int{}
	want := make(map[string]map[string]string, len(p.zones))
	refused := make(map[string]map[string]string, len(p.zones))
	for name := range p.zones {
		want[name], refused[name] = map[string]string{}, map[string]string{}
	}
	for _, c := range claims {
		if perZone[c.zone] >= p.cfg.MaxPerZone {
			refused[c.zone][c.host] = "max_records"
			continue
		}
		// A host claimed by several instances is charged to one with room,
		// the one it was charged to last first: another instance listing
		// it beside hosts of its own cannot spend its place.
		claimant, ok := "", false
		if last, had := p.zones[c.zone].want[c.host]; had && slices.Contains(c.claimants, last) && perInstance[last] < p.cfg.MaxPerInstance {
			claimant, ok = last, true
		}
		for _, name := range c.claimants {
			if ok {
				break
			}
			if perInstance[name] < p.cfg.MaxPerInstance {
				claimant, ok = name, true
			}
		}
		if !ok {
			refused[c.zone][c.host] = "max_records_per_instance"
			continue
		}
		perZone[c.zone]++
		perInstance[claimant]++
		want[c.zone][c.host] = claimant
	}
	type graceEntry struct {
		zone, host string
		graceHost
	}
	var grace []graceEntry
	for name, z := range p.zones {
		for host := range z.published {
			if _, ok := want[name][host]; !ok {
				delete(z.published, host)
				z.gone[host] = graceHost{since: now, claimant: z.want[host]}
			}
		}
		for host, g := range z.gone {
			if _, ok := want[name][host]; ok {
				delete(z.gone, host) // claimed again: ensure finds its records
				continue
			}
			grace = append(grace, graceEntry{name, host, g})
		}
		z.want = want[name]
		clear(z.evict)
	}
	slices.SortFunc(grace, func(a, b graceEntry) int {
		if c := b.since.Compare(a.since); c != 0 {
			return c
		}
		return strings.Compare(a.host, b.host)
	})
	for _, g := range grace {
		if perZone[g.zone] >= p.cfg.MaxPerZone || g.claimant != "" && perInstance[g.claimant] >= p.cfg.MaxPerInstance {
			p.zones[g.zone].evict[g.host] = true
			continue
		}
		perZone[g.zone]++
		if g.claimant != "" {
			perInstance[g.claimant]++
		}
	}
	for name, z := range p.zones {
		p.noteRefused(z, refused[name])
	}
}

// noteRefused records the claimed hosts of zone z the caps leave out,
// counting each once as it begins and warning when their number changes.
func (p *Publisher) noteRefused(z *zoneState, refused map[string]string) {
	for host, bound := range refused {
		if z.refused[host] != bound {
			Refused.WithLabelValues(z.name, bound).Inc()
		}
	}
	if len(refused) != len(z.refused) && len(refused) > 0 {
		p.logger.Warn("dns_records: more hosts than the caps allow, counting those in their grace period; new claims get no record until there is room",
			zap.String("zone", z.name), zap.Int("refused", len(refused)), zap.Int("in_grace_period", len(z.gone)),
			zap.Int("max_records_per_instance", p.cfg.MaxPerInstance), zap.Int("max_records", p.cfg.MaxPerZone))
	}
	z.refused = refused
}

// zoneOf is the longest configured zone host is in, "" if none.
func (p *Publisher) zoneOf(host string) string {
	best := ""
	for _, z := range p.cfg.Zones {
		if (host == z || strings.HasSuffix(host, "."+z)) && len(z) > len(best) {
			best = z
		}
	}
	return best
}

// validHost reports whether host, from a tenant's label, is a DNS name
// that fits with the owner label in front: letters, digits, '-' and '_',
// labels of 1 to 63 bytes, 240 in all, not an IP address, and no label
// starting with '_': such names hold what speaks for a domain (the ACME
// DNS-01 challenge at `_acme-challenge.<name>`, DKIM keys, the owner TXT
// records themselves), and a record there would let a tenant take them
// over (R7e). The permission refuses them too; a Source that would not
// is not trusted.
func validHost(host string) bool {
	if len(host) == 0 || len(host) > 240 || catalog.UnderscoreLabel(host) {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// pass brings each zone in line with the claimed hosts of snap, and
// returns when to pass again without a change (zero: no need).
func (p *Publisher) pass(snap *catalog.Snapshot) time.Time {
	now := p.now()
	p.desired(snap, now)
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	statuses := make([]ZoneStatus, 0, len(p.zones))
	for _, name := range p.cfg.Zones {
		z := p.zones[name]
		later(p.zonePass(z, now))
		statuses = append(statuses, z.status())
	}
	p.status.Store(&statuses)
	return next
}

// zonePass brings zone z in line with z.want, and returns when it needs
// another pass.
func (p *Publisher) zonePass(z *zoneState, now time.Time) time.Time {
	for host := range z.foreign {
		if _, ok := z.want[host]; !ok {
			delete(z.foreign, host)
		}
	}
	if now.Before(z.retryAt) {
		return z.retryAt
	}
	due := now.Sub(z.synced) >= resync || len(z.evict) > 0 || z.pending() > 0
	for _, g := range z.gone {
		if now.Sub(g.since) >= p.cfg.Grace {
			due = true
		}
	}
	if due {
		if err := p.sync(z, now); err != nil {
			z.failures++
			delay := min(backoffMin<<min(z.failures-1, 20), backoffMax)
			z.retryAt = now.Add(delay)
			z.lastErr = err.Error()
			p.logger.Warn("dns_records: the zone's records could not be brought in line; trying again after the backoff",
				zap.String("zone", z.name), zap.Duration("backoff", delay), zap.Int("failures", z.failures), zap.Error(err))
			return z.retryAt
		}
		z.failures, z.retryAt, z.lastErr = 0, time.Time{}, ""
	}
	next := z.synced.Add(resync)
	for _, g := range z.gone {
		if t := g.since.Add(p.cfg.Grace); t.Before(next) {
			next = t
		}
	}
	// More than maxWritesPerPass, or hosts found at the read that the
	// caps may leave no room for: the next pass decides at once.
	if z.pending() > 0 || len(z.evict) > 0 || len(z.want)+len(z.gone) > p.cfg.MaxPerZone {
		next = now
	}
	return next
}

// pending is how many hosts of z.want wait for their records.
func (z *zoneState) pending() int {
	n := 0
	for host := range z.want {
		if !z.published[host] && !z.foreign[host] {
			n++
		}
	}
	return n
}

// status is z's state after its last pass.
func (z *zoneState) status() ZoneStatus {
	return ZoneStatus{Zone: z.name, Published: len(z.published), Pending: z.pending(), Gone: len(z.gone),
		Foreign: len(z.foreign), Dropped: len(z.refused), Evicted: len(z.evict), LastError: z.lastErr, RetryAt: z.retryAt}
}

// sync reads zone z under its storage lock and writes what z.want
// needs: first the removal of ours the caps leave no room for (the
// oldest first) and of those whose grace period ended, then the records
// of the wanted hosts that have none, so that the zone stays within its
// caps between two writes too.
func (p *Publisher) sync(z *zoneState, now time.Time) (err error) {
	if p.cfg.Locker != nil {
		lock := "caddy-dicer/dns/" + p.cfg.Owner + "/" + z.name
		ctx, cancel := context.WithTimeout(p.run, callTimeout)
		err := p.cfg.Locker.Lock(ctx, lock)
		cancel()
		if err != nil {
			updates.WithLabelValues(z.name, "lock", "error").Inc()
			return fmt.Errorf("taking the storage lock %s: %w", lock, err)
		}
		defer func() {
			if uerr := p.cfg.Locker.Unlock(context.Background(), lock); uerr != nil && err == nil {
				err = fmt.Errorf("releasing the storage lock %s: %w", lock, uerr)
			}
		}()
	}
	zone, err := p.read(z.name)
	if err != nil {
		return err
	}
	z.synced = now
	// Records of ours that nobody claims (written before a restart, or
	// by a Caddy of the fleet) start their grace period now; the next
	// pass counts them against the caps.
	for host := range zone.owned {
		if _, ok := z.want[host]; !ok {
			if _, ok := z.gone[host]; !ok {
				z.gone[host] = graceHost{since: now}
			}
		}
	}
	removals := sortedKeys(z.gone)
	slices.SortStableFunc(removals, func(a, b string) int {
		if z.evict[a] != z.evict[b] {
			if z.evict[a] {
				return -1
			}
			return 1
		}
		return z.gone[a].since.Compare(z.gone[b].since)
	})
	writes := 0
	for _, host := range removals {
		if writes >= maxWritesPerPass {
			return nil // the rest, and the new records, in the next pass
		}
		evicted := z.evict[host]
		if !evicted && now.Sub(z.gone[host].since) < p.cfg.Grace {
			continue
		}
		if !zone.owned[host] {
			delete(z.gone, host) // removed by someone else: nothing of ours left
			delete(z.evict, host)
			continue
		}
		writes++
		if err := p.remove(z, zone, host, evicted); err != nil {
			return err
		}
		delete(z.gone, host)
		delete(z.evict, host)
	}
	for _, host := range sortedKeys(z.want) {
		if writes >= maxWritesPerPass {
			break
		}
		wrote, err := p.ensure(z, zone, host)
		if wrote {
			writes++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ensure makes host's records of ours in zone z point at the targets,
// and reports whether it wrote. Records at the name that the owner TXT
// does not list (made by hand beside ours: an AAAA, a TXT, an MX) stay
// as they are.
func (p *Publisher) ensure(z *zoneState, zone *zoneView, host string) (bool, error) {
	rel := libdns.RelativeName(host, z.name)
	if !zone.owned[host] {
		if len(zone.targets[host]) > 0 || (p.cfg.CNAME != "" && zone.other[host]) {
			p.noteForeign(z, host, "the host has records caddy-dicer did not write (no owner TXT of ours); they are left as they are, and no record is written")
			return false, nil
		}
		recs := append([]libdns.Record{p.ownerRecord(rel)}, p.targets(rel)...)
		if err := p.call(z.name, "create", func(ctx context.Context) error {
			_, err := p.cfg.Provider.AppendRecords(ctx, z.name, recs)
			return err
		}); err != nil {
			return true, err
		}
		p.logger.Info("dns_records: record written for the claimed host",
			zap.String("host", host), zap.String("zone", z.name), zap.Strings("targets", p.targetStrings()))
		z.published[host] = true
		delete(z.foreign, host)
		return true, nil
	}
	ours, others := zone.ours(host)
	wanted := map[string]bool{}
	for _, r := range p.targets(rel) {
		wanted[targetKey(r)] = true
	}
	var stale, missing []libdns.Record
	have := map[string]bool{}
	for _, r := range ours {
		if k := targetKey(r); wanted[k] {
			have[k] = true
		} else {
			stale = append(stale, r)
		}
	}
	for _, r := range p.targets(rel) {
		if !have[targetKey(r)] {
			missing = append(missing, r)
		}
	}
	if p.cfg.CNAME != "" && len(missing) > 0 && (len(others) > 0 || zone.other[host]) {
		// A CNAME cannot sit beside other records (the address setting
		// became a cname one, and records were made by hand beside ours).
		p.noteForeign(z, host, "the host has records caddy-dicer did not write beside its own, and a CNAME cannot sit beside them; nothing is written")
		return false, nil
	}
	delete(z.foreign, host)
	if len(stale) == 0 && len(missing) == 0 && zone.current[host] {
		z.published[host] = true // written by us before, or by a Caddy of the fleet
		return false, nil
	}
	// Ours, pointing elsewhere (the address setting changed), or an owner
	// TXT listing other records: the stale records go first (a CNAME
	// and an address cannot sit together), then the new ones with the
	// owner TXT listing them, then the old owner TXT.
	if len(stale) > 0 {
		if err := p.call(z.name, "delete", func(ctx context.Context) error {
			_, err := p.cfg.Provider.DeleteRecords(ctx, z.name, stale)
			return err
		}); err != nil {
			return true, err
		}
	}
	var oldOwner []libdns.Record
	if !zone.current[host] {
		missing = append(missing, p.ownerRecord(rel))
		oldOwner = zone.ownerRecs[host]
	}
	if len(missing) > 0 {
		if err := p.call(z.name, "create", func(ctx context.Context) error {
			_, err := p.cfg.Provider.AppendRecords(ctx, z.name, missing)
			return err
		}); err != nil {
			return true, err
		}
	}
	if len(oldOwner) > 0 {
		if err := p.call(z.name, "delete", func(ctx context.Context) error {
			_, err := p.cfg.Provider.DeleteRecords(ctx, z.name, oldOwner)
			return err
		}); err != nil {
			return true, err
		}
	}
	p.logger.Info("dns_records: record of ours pointed at the new targets",
		zap.String("host", host), zap.String("zone", z.name), zap.Strings("targets", p.targetStrings()))
	z.published[host] = true
	return true, nil
}

// noteForeign marks host as having records that keep caddy-dicer from
// writing, warning once.
func (p *Publisher) noteForeign(z *zoneState, host, why string) {
	if !z.foreign[host] {
		p.logger.Warn("dns_records: "+why,
			zap.String("host", host), zap.String("zone", z.name), zap.String("owner_record", OwnerPrefix+"."+host))
		z.foreign[host] = true
	}
	delete(z.published, host)
}

// remove deletes host's records of ours (those its owner TXT lists) and
// then its owner TXT, in one update; records made by hand beside them
// stay. evicted: before its grace period ended, for the caps.
func (p *Publisher) remove(z *zoneState, zone *zoneView, host string, evicted bool) error {
	ours, _ := zone.ours(host)
	recs := append(slices.Clone(ours), zone.ownerRecs[host]...)
	if err := p.call(z.name, "delete", func(ctx context.Context) error {
		_, err := p.cfg.Provider.DeleteRecords(ctx, z.name, recs)
		return err
	}); err != nil {
		return err
	}
	if evicted {
		p.logger.Info("dns_records: record removed before the end of its grace period, the oldest unclaimed: the caps leave no room for it",
			zap.String("host", host), zap.String("zone", z.name),
			zap.Int("max_records", p.cfg.MaxPerZone), zap.Int("max_records_per_instance", p.cfg.MaxPerInstance))
	} else {
		p.logger.Info("dns_records: record removed, no instance has claimed the host for the grace period",
			zap.String("host", host), zap.String("zone", z.name), zap.Duration("grace", p.cfg.Grace))
	}
	delete(z.published, host)
	return nil
}

// call runs one provider call within callTimeout and counts it.
func (p *Publisher) call(zone, op string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.run, callTimeout)
	defer cancel()
	err := fn(ctx)
	result := "ok"
	if err != nil {
		result = "error"
		if errors.Is(err, context.Canceled) && p.run.Err() != nil {
			result = "canceled"
		}
	}
	updates.WithLabelValues(zone, op, result).Inc()
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// ownerText is the owner TXT's text for this publisher: its owner, and
// the values of the records it writes (R7e), which are the records of
// the name it changes and removes:
// `heritage=caddy-dicer,owner=caddy-dicer,targets=203.0.113.7/2001:db8::7`.
func (p *Publisher) ownerText() string {
	return ownerPrefixText(p.cfg.Owner) + ",targets=" + strings.Join(p.targetStrings(), "/")
}

// ownerPrefixText is what every owner TXT of owner starts with.
func ownerPrefixText(owner string) string { return "heritage=caddy-dicer,owner=" + owner }

// ownerRecord is the owner TXT for rel, the host's name relative to its
// zone.
func (p *Publisher) ownerRecord(rel string) libdns.Record {
	return libdns.TXT{Name: ownerName(rel), TTL: p.cfg.TTL, Text: p.ownerText()}
}

// ownerName is the name of the owner TXT of rel.
func ownerName(rel string) string {
	if rel == "@" || rel == "" {
		return OwnerPrefix
	}
	return OwnerPrefix + "." + rel
}

// targets are the records host rel points by.
func (p *Publisher) targets(rel string) []libdns.Record {
	if p.cfg.CNAME != "" {
		return []libdns.Record{libdns.CNAME{Name: rel, TTL: p.cfg.TTL, Target: p.cfg.CNAME + "."}}
	}
	out := make([]libdns.Record, 0, len(p.cfg.Addresses))
	for _, ip := range p.cfg.Addresses {
		out = append(out, libdns.Address{Name: rel, TTL: p.cfg.TTL, IP: ip})
	}
	return out
}

func (p *Publisher) targetStrings() []string {
	if p.cfg.CNAME != "" {
		return []string{p.cfg.CNAME}
	}
	out := make([]string, 0, len(p.cfg.Addresses))
	for _, ip := range p.cfg.Addresses {
		out = append(out, ip.String())
	}
	return out
}

// targetKey is a record's type and value, compared without case or a
// trailing dot, an address in its canonical form.
func targetKey(r libdns.Record) string {
	rr := r.RR()
	data := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(rr.Data)), ".")
	if ip, err := netip.ParseAddr(data); err == nil && (rr.Type == "A" || rr.Type == "AAAA") {
		data = ip.Unmap().String()
	}
	return rr.Type + " " + data
}

// valueKey is the targetKey of a value listed in an owner TXT.
func valueKey(v string) string {
	if ip, err := netip.ParseAddr(v); err == nil {
		if ip = ip.Unmap(); ip.Is4() {
			return "A " + ip.String()
		}
		return "AAAA " + ip.String()
	}
	return "CNAME " + strings.TrimSuffix(strings.ToLower(v), ".")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
