package dnsrecords

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libdns/libdns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// memZone is a libdns provider over one in-memory zone, counting writes.
type memZone struct {
	mu      sync.Mutex
	recs    []libdns.RR
	writes  int
	failing error
}

func (m *memZone) GetRecords(_ context.Context, _ string) ([]libdns.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return nil, m.failing
	}
	out := make([]libdns.Record, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r)
	}
	return out, nil
}

func (m *memZone) AppendRecords(_ context.Context, _ string, recs []libdns.Record) ([]libdns.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return nil, m.failing
	}
	m.writes++
	for _, r := range recs {
		m.recs = append(m.recs, r.RR())
	}
	return recs, nil
}

func (m *memZone) DeleteRecords(_ context.Context, _ string, recs []libdns.Record) ([]libdns.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return nil, m.failing
	}
	m.writes++
	for _, r := range recs {
		rr := r.RR()
		m.recs = slices.DeleteFunc(m.recs, func(x libdns.RR) bool {
			return x.Name == rr.Name && x.Type == rr.Type && x.Data == rr.Data
		})
	}
	return recs, nil
}

// has reports whether the zone holds a record of name and type.
func (m *memZone) has(name, typ string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.recs, func(x libdns.RR) bool { return x.Name == name && x.Type == typ })
}

// allowAll is a permission allowing every name under example.test.
type allowAll struct{ cat *catalog.Catalog }

func (a allowAll) Snapshot() *catalog.Snapshot { return a.cat.Snapshot() }
func (a allowAll) Decide(host string) error {
	if strings.HasSuffix(host, ".example.test") {
		return nil
	}
	return errors.New("not under allow_suffix")
}

// memLock is a Locker in memory, shared by the publishers of a fleet.
type memLock struct{ mu sync.Mutex }

func (l *memLock) Lock(context.Context, string) error   { l.mu.Lock(); return nil }
func (l *memLock) Unlock(context.Context, string) error { l.mu.Unlock(); return nil }

// rig is a publisher over a catalog and a memZone, on a clock of its own.
type rig struct {
	cat  *catalog.Catalog
	zone *memZone
	pub  *Publisher
	now  time.Time
}

func newRig(t *testing.T, zone *memZone, lock Locker, tweak func(*Config)) *rig {
	t.Helper()
	r := &rig{cat: catalog.New(catalog.Options{}), zone: zone, now: time.Unix(1_000_000, 0)}
	cfg := Config{
		Provider: zone, Zones: []string{"example.test"},
		Addresses: []netip.Addr{netip.MustParseAddr("203.0.113.7")},
		TTL:       DefaultTTL, Grace: time.Minute, Owner: DefaultOwner,
		MaxPerInstance: DefaultMaxPerInstance, MaxPerZone: DefaultMaxPerZone, Locker: lock,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r.pub = New(cfg, allowAll{r.cat})
	r.pub.now = func() time.Time { return r.now }
	return r
}

func (r *rig) claim(name, hosts string) {
	r.cat.Put(catalog.Instance{ID: name, Name: name, State: catalog.StateRunning, Labels: map[string]string{catalog.LabelHost: hosts}})
}

func (r *rig) pass() { r.pub.pass(r.cat.Snapshot()) }

// TestDNSRecordsPublishAndGrace: a claimed host gets its A record and the
// owner TXT; once unclaimed, both stay for the grace period and then go.
func TestDNSRecordsPublishAndGrace(t *testing.T) {
	r := newRig(t, &memZone{}, nil, nil)
	r.claim("app", "app.example.test")
	r.pass()
	if !r.zone.has("app", "A") || !r.zone.has("_caddy-dicer.app", "TXT") {
		t.Fatalf("no A and owner TXT after the claim: %v", r.zone.recs)
	}
	r.cat.Delete("app")
	r.pass()
	r.now = r.now.Add(59 * time.Second)
	r.pass()
	if !r.zone.has("app", "A") {
		t.Fatal("the record went before the grace period ended")
	}
	r.now = r.now.Add(2 * time.Second)
	r.pass()
	if r.zone.has("app", "A") || r.zone.has("_caddy-dicer.app", "TXT") {
		t.Fatalf("records left after the grace period: %v", r.zone.recs)
	}
}

// TestDNSRecordsReclaimInGraceKeeps: a host claimed again within the grace
// period keeps its record, unwritten.
func TestDNSRecordsReclaimInGraceKeeps(t *testing.T) {
	r := newRig(t, &memZone{}, nil, nil)
	r.claim("app", "app.example.test")
	r.pass()
	r.cat.Delete("app")
	r.now = r.now.Add(30 * time.Second)
	r.pass()
	r.claim("app2", "app.example.test")
	r.now = r.now.Add(time.Hour)
	writes := r.zone.writes
	r.pass()
	if !r.zone.has("app", "A") || r.zone.writes != writes {
		t.Fatalf("a host claimed again lost its record or was rewritten: writes %d -> %d", writes, r.zone.writes)
	}
}

// TestDNSRecordsForeignUntouched: a record made by hand (no owner TXT of
// ours) is neither overwritten nor deleted, and an owner TXT of another
// owner does not count as ours.
func TestDNSRecordsForeignUntouched(t *testing.T) {
	zone := &memZone{recs: []libdns.RR{
		{Name: "manual", Type: "A", Data: "192.0.2.1"},
		{Name: "other", Type: "A", Data: "192.0.2.2"},
		{Name: "_caddy-dicer.other", Type: "TXT", Data: "heritage=caddy-dicer,owner=another-fleet"},
	}}
	r := newRig(t, zone, nil, nil)
	r.claim("a", "manual.example.test,other.example.test")
	r.pass()
	r.cat.Delete("a")
	r.now = r.now.Add(time.Hour)
	r.pass()
	if zone.writes != 0 || len(zone.recs) != 3 {
		t.Fatalf("records not ours were changed: %d writes, %v", zone.writes, zone.recs)
	}
	if st := r.pub.Status(); len(st) != 1 || st[0].Foreign != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestDNSRecordsOutsidePermissionWritesNothing: a claim the permission
// refuses (outside allow_suffix), outside the zones, or not a DNS name
// writes nothing.
func TestDNSRecordsOutsidePermissionWritesNothing(t *testing.T) {
	r := newRig(t, &memZone{}, nil, nil)
	r.claim("t", "evil.example.com,x.other.test,bad_\x01.example.test,*.example.test,10.0.0.1")
	r.pass()
	if r.zone.writes != 0 {
		t.Fatalf("wrote for refused claims: %v", r.zone.recs)
	}
}

// TestDNSRecordsBounds: at most MaxPerInstance hosts of one instance and
// MaxPerZone in a zone get records, the same ones from pass to pass.
func TestDNSRecordsBounds(t *testing.T) {
	r := newRig(t, &memZone{}, nil, func(c *Config) { c.MaxPerInstance = 2; c.MaxPerZone = 3 })
	r.claim("a", "a1.example.test,a2.example.test,a3.example.test")
	r.claim("b", "b1.example.test,b2.example.test")
	r.pass()
	st := r.pub.Status()[0]
	if st.Published != 3 || st.Dropped != 2 {
		t.Fatalf("want 3 published, 2 left out: %+v", st)
	}
	if !r.zone.has("a1", "A") || !r.zone.has("a2", "A") || r.zone.has("a3", "A") {
		t.Fatalf("instance a's cap: %v", r.zone.recs)
	}
}

// TestDNSRecordsFleetWritesOnce: two publishers sharing the zone, a lock
// and the owner write each record once, and remove it once.
func TestDNSRecordsFleetWritesOnce(t *testing.T) {
	zone, lock := &memZone{}, &memLock{}
	a, b := newRig(t, zone, lock, nil), newRig(t, zone, lock, nil)
	a.claim("app", "app.example.test")
	b.claim("app", "app.example.test")
	a.pass()
	b.pass()
	if zone.writes != 1 {
		t.Fatalf("the fleet wrote %d times, want once", zone.writes)
	}
	if b.pub.Status()[0].Published != 1 {
		t.Fatalf("the second Caddy does not see the record as published: %+v", b.pub.Status())
	}
	a.cat.Delete("app")
	b.cat.Delete("app")
	a.pass()
	b.pass()
	a.now, b.now = a.now.Add(time.Hour), b.now.Add(time.Hour)
	a.pass()
	b.pass()
	if zone.writes != 2 || len(zone.recs) != 0 {
		t.Fatalf("want one removal: %d writes, %v", zone.writes, zone.recs)
	}
}

// TestDNSRecordsBackoff: a failing provider is retried after a growing
// delay, not at each change, and the error shows in the status.
func TestDNSRecordsBackoff(t *testing.T) {
	zone := &memZone{failing: errors.New("server down")}
	r := newRig(t, zone, nil, nil)
	r.claim("app", "app.example.test")
	next := r.pub.pass(r.cat.Snapshot())
	if d := next.Sub(r.now); d != backoffMin {
		t.Fatalf("first retry after %v, want %v", d, backoffMin)
	}
	r.now = next
	next = r.pub.pass(r.cat.Snapshot())
	if d := next.Sub(r.now); d != 2*backoffMin {
		t.Fatalf("second retry after %v, want %v", d, 2*backoffMin)
	}
	if st := r.pub.Status()[0]; st.LastError == "" || st.Pending != 1 {
		t.Fatalf("status %+v", st)
	}
	zone.mu.Lock()
	zone.failing = nil
	zone.mu.Unlock()
	r.now = next
	r.pass()
	if !zone.has("app", "A") || r.pub.Status()[0].LastError != "" {
		t.Fatalf("not written once the provider is back: %v %+v", zone.recs, r.pub.Status())
	}
}

// TestDNSRecordsRestartCollectsOrphans: records of ours that no instance
// claims when the publisher starts (claimed while Caddy was down) go after
// the grace period.
func TestDNSRecordsRestartCollectsOrphans(t *testing.T) {
	zone := &memZone{recs: []libdns.RR{
		{Name: "old", Type: "A", Data: "203.0.113.7"},
		{Name: "_caddy-dicer.old", Type: "TXT", Data: "heritage=caddy-dicer,owner=caddy-dicer"},
	}}
	r := newRig(t, zone, nil, nil)
	r.claim("x", "x.example.test")
	r.pass()
	if !zone.has("old", "A") {
		t.Fatal("an orphan went before the grace period")
	}
	r.now = r.now.Add(2 * time.Minute)
	r.pass()
	if zone.has("old", "A") || zone.has("_caddy-dicer.old", "TXT") {
		t.Fatalf("orphan left: %v", zone.recs)
	}
}

// TestDNSRecords_R7e_underscore_label_gets_no_record: in cname mode, a
// tenant's claim of `_acme-challenge.<name>` (the apex's included) or of
// an owner TXT's name writes nothing, even from a Source that allows it:
// a CNAME there would hand the domain's DNS-01 challenges to the target.
func TestDNSRecords_R7e_underscore_label_gets_no_record(t *testing.T) {
	r := newRig(t, &memZone{}, nil, func(c *Config) { c.Addresses = nil; c.CNAME = "lb.example.net" })
	r.claim("t", "_acme-challenge.example.test,_acme-challenge.app.example.test,_caddy-dicer.app.example.test,x._domainkey.example.test")
	r.claim("app", "app.example.test")
	r.pass()
	r.zone.mu.Lock()
	defer r.zone.mu.Unlock()
	for _, rr := range r.zone.recs {
		if rr.Type == "CNAME" && rr.Name != "app" {
			t.Errorf("a record at %s: %v", rr.Name, rr)
		}
	}
	if r.zone.writes != 1 {
		t.Fatalf("%d writes, want app.example.test's alone: %v", r.zone.writes, r.zone.recs)
	}
}

// hosts is how many hosts have records of ours in the zone (A or CNAME
// beside an owner TXT).
func (m *memZone) hosts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.recs {
		if r.Type == "TXT" && strings.HasPrefix(r.Name, OwnerPrefix+".") {
			n++
		}
	}
	return n
}

// settle passes until a pass writes nothing and nothing is pending, at
// most 100 times; the zone's hosts must stay within max at every pass.
func (r *rig) settle(t *testing.T, max int) {
	t.Helper()
	for range 100 {
		r.pass()
		if n := r.zone.hosts(); n > max {
			t.Fatalf("%d hosts with records in the zone, over the cap of %d", n, max)
		}
		writes := r.zone.writes
		r.pass()
		if n := r.zone.hosts(); n > max {
			t.Fatalf("%d hosts with records in the zone, over the cap of %d", n, max)
		}
		if r.pub.Status()[0].Pending == 0 && r.zone.writes == writes {
			return
		}
	}
	t.Fatalf("the zone never settled: %+v", r.pub.Status())
}

// TestDNSRecords_R7e_grace_hosts_count_against_max_records: a host in its
// grace period holds a place under max_records; a new claim takes the
// place of the oldest one (removed before its grace period ends), and
// while the claimed hosts fill the zone a new claim gets no record,
// counted once.
func TestDNSRecords_R7e_grace_hosts_count_against_max_records(t *testing.T) {
	r := newRig(t, &memZone{}, nil, func(c *Config) { c.MaxPerZone = 3 })
	for _, h := range []string{"a1", "a2", "a3"} {
		r.claim(h, h+".example.test")
	}
	r.settle(t, 3)
	for _, h := range []string{"a1", "a2", "a3"} { // a1 is the oldest in its grace period
		r.cat.Delete(h)
		r.settle(t, 3)
		r.now = r.now.Add(time.Second)
	}
	r.claim("b1", "b1.example.test")
	r.settle(t, 3)
	if !r.zone.has("b1", "A") || r.zone.has("a1", "A") || !r.zone.has("a2", "A") || !r.zone.has("a3", "A") {
		t.Fatalf("want b1 in place of a1, the oldest in its grace period: %v", r.zone.recs)
	}
	r.claim("b2", "b2.example.test")
	r.claim("b3", "b3.example.test")
	r.settle(t, 3)
	refused := testutil.ToFloat64(Refused.WithLabelValues("example.test", "max_records"))
	r.claim("b4", "b4.example.test")
	r.settle(t, 3)
	r.settle(t, 3)
	if r.zone.has("b4", "A") || r.pub.Status()[0].Dropped != 1 {
		t.Fatalf("a claim past max_records, all claimed: %+v %v", r.pub.Status(), r.zone.recs)
	}
	if n := testutil.ToFloat64(Refused.WithLabelValues("example.test", "max_records")) - refused; n != 1 {
		t.Fatalf("caddy_dicer_dns_records_refused_total{bound=max_records} grew by %v, want 1", n)
	}
}

// TestDNSRecords_R7e_grace_hosts_count_against_max_records_per_instance:
// an instance relabelled to new hosts keeps max_records_per_instance in
// all, its hosts in their grace period included.
func TestDNSRecords_R7e_grace_hosts_count_against_max_records_per_instance(t *testing.T) {
	r := newRig(t, &memZone{}, nil, func(c *Config) { c.MaxPerInstance = 2 })
	r.claim("a", "a1.example.test,a2.example.test")
	r.settle(t, 2)
	r.claim("a", "a3.example.test,a4.example.test")
	r.settle(t, 2)
	if !r.zone.has("a3", "A") || !r.zone.has("a4", "A") || r.zone.has("a1", "A") || r.zone.has("a2", "A") {
		t.Fatalf("want a3 and a4 alone: %v", r.zone.recs)
	}
}

// TestDNSRecords_R7e_relabel_churn_stays_within_the_caps: the issue's
// measure, with the defaults: one instance relabelled to 25 new hosts
// every 5 s for 10 minutes (within the grace period), and as many new
// instances of 25 hosts each; the zone never holds more than
// max_records hosts, the per-instance churn no more than 25 of its own.
func TestDNSRecords_R7e_relabel_churn_stays_within_the_caps(t *testing.T) {
	r := newRig(t, &memZone{}, nil, func(c *Config) { c.Grace = DefaultGrace })
	labels := func(round int) string {
		var hosts []string
		for i := range DefaultMaxPerInstance {
			hosts = append(hosts, fmt.Sprintf("r%d-%d.example.test", round, i))
		}
		return strings.Join(hosts, ",")
	}
	for round := range 120 {
		r.claim("churn", labels(round))
		r.settle(t, DefaultMaxPerInstance)
		r.now = r.now.Add(5 * time.Second)
	}
	if n := r.zone.hosts(); n != DefaultMaxPerInstance {
		t.Fatalf("one instance relabelled 120 times left %d hosts, want its %d", n, DefaultMaxPerInstance)
	}
	r.cat.Delete("churn")
	for round := range 120 {
		r.claim(fmt.Sprintf("new-%d", round), labels(1000+round))
		r.settle(t, DefaultMaxPerZone)
		r.cat.Delete(fmt.Sprintf("new-%d", round))
		r.now = r.now.Add(5 * time.Second)
	}
	if n := r.zone.hosts(); n > DefaultMaxPerZone {
		t.Fatalf("%d hosts, over max_records %d", n, DefaultMaxPerZone)
	}
}

// TestDNSRecords_R7e_hand_made_records_beside_ours_survive: on a name
// Caddy owns, records made by hand beside its A (an AAAA, a TXT, an MX)
// stay through the zone's next reads, a change of the address setting
// and the removal after the grace period; only the records the owner
// TXT lists are Caddy's.
func TestDNSRecords_R7e_hand_made_records_beside_ours_survive(t *testing.T) {
	zone := &memZone{}
	r := newRig(t, zone, nil, nil)
	r.claim("app", "app.example.test")
	r.pass()
	if !zone.has("app", "A") {
		t.Fatalf("no A: %v", zone.recs)
	}
	hand := []libdns.RR{
		{Name: "app", Type: "AAAA", Data: "2001:db8::99"},
		{Name: "app", Type: "TXT", Data: "v=spf1 -all"},
		{Name: "app", Type: "MX", Data: "10 mail.example.test."},
	}
	zone.mu.Lock()
	zone.recs = append(zone.recs, hand...)
	zone.mu.Unlock()
	survived := func(when string) {
		t.Helper()
		for _, h := range hand {
			if !zone.has(h.Name, h.Type) {
				t.Fatalf("%s: the hand-made %s went: %v", when, h.Type, zone.recs)
			}
		}
	}
	r.now = r.now.Add(resync) // the zone is read again, the claim ensured
	r.pass()
	survived("the next read")
	if !zone.has("app", "A") {
		t.Fatalf("Caddy's A went: %v", zone.recs)
	}

	// The next config's publisher points the host elsewhere.
	moved := newRig(t, zone, nil, func(c *Config) { c.Addresses = []netip.Addr{netip.MustParseAddr("203.0.113.8")} })
	moved.cat = r.cat
	moved.pub.src = allowAll{r.cat}
	moved.now = r.now
	moved.pass()
	survived("an address change")
	zone.mu.Lock()
	for _, rr := range zone.recs {
		if rr.Type == "A" && rr.Data != "203.0.113.8" {
			t.Errorf("the old address stayed: %v", rr)
		}
	}
	zone.mu.Unlock()

	r.cat.Delete("app")
	moved.pass()
	moved.now = moved.now.Add(2 * time.Minute)
	moved.pass()
	survived("the removal")
	if zone.has("app", "A") || zone.has("_caddy-dicer.app", "TXT") {
		t.Fatalf("Caddy's records stayed after the grace period: %v", zone.recs)
	}
}
