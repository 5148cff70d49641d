package dnsrecords

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libdns/libdns"

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
