// Package fleet is what several Caddys that share one storage (Caddy's
// `storage`: a shared folder, Redis, Consul...) tell each other, so that
// they act as one proxy (R5m, R4e): leases on the instances each keeps
// awake, and the runtime switches (weights, maintenance) an operator set
// through any of them. Nothing here is on a request's path: leases are
// written by a publisher at most once per instance per a fraction of its
// standby_after, read only before an instance is put on standby; the
// switches are read once a second.
//
// It declares the part of a storage it uses (Storage), which Caddy's
// storage modules (certmagic.Storage) have, and imports no Caddy.
package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Storage is the part of Caddy's storage (certmagic.Storage) the fleet
// uses.
type Storage interface {
	Store(ctx context.Context, key string, value []byte) error
	Load(ctx context.Context, key string) ([]byte, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, path string, recursive bool) ([]string, error)
}

// Prefix is where the fleet's keys live in the storage.
const Prefix = "dicer/fleet"

// Self names this Caddy in the fleet: ID is its instance ID (Caddy's
// caddy.InstanceID, kept in its data directory), Host its host name, for
// people.
type Self struct {
	ID, Host string
}

// Lease is what one Caddy of the fleet says of one instance it routes to.
type Lease struct {
	// Caddy is the writer's Self.ID, Host its host name.
	Caddy string `json:"caddy"`
	Host  string `json:"host,omitempty"`
	// LastUse is when the writer last routed a request or connection to
	// the instance (its wall clock).
	LastUse time.Time `json:"last_use"`
	// InFlight is how many of those were in flight when it wrote.
	InFlight int `json:"in_flight"`
	// Expires is when the lease ends unless renewed: a Caddy that died
	// holds nothing awake past it.
	Expires time.Time `json:"expires"`
}

// Fleet is this Caddy's view of its fleet, through the storage last set.
// The zero Fleet has no storage: it writes nothing and holds nothing.
type Fleet struct {
	self    Self
	storage atomic.Pointer[storageBox]
}

type storageBox struct{ s Storage }

// New is the fleet of self, with no storage yet.
func New(self Self) *Fleet { return &Fleet{self: self} }

// Self is this Caddy.
func (f *Fleet) Self() Self { return f.self }

// SetStorage makes s the storage the fleet shares (a config load's
// storage: the last load wins); nil stops sharing.
func (f *Fleet) SetStorage(s Storage) {
	if s == nil {
		f.storage.Store(nil)
		return
	}
	f.storage.Store(&storageBox{s})
}

func (f *Fleet) store() Storage {
	if f == nil {
		return nil
	}
	if b := f.storage.Load(); b != nil {
		return b.s
	}
	return nil
}

// Shared reports whether the fleet has a storage.
func (f *Fleet) Shared() bool { return f.store() != nil }

// safeKey is a key part as it is if it is a plain name, else its hash: an
// instance ID comes from a daemon, and is not trusted to be a path.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func safeKey(s string) string {
	if plainName.MatchString(s) && s != "." && s != ".." {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h-" + hex.EncodeToString(sum[:16])
}

func leaseDir(instance string) string { return path.Join(Prefix, "leases", safeKey(instance)) }

// Publish writes this Caddy's lease on instance.
func (f *Fleet) Publish(ctx context.Context, instance string, l Lease) error {
	s := f.store()
	if s == nil {
		return nil
	}
	l.Caddy, l.Host = f.self.ID, f.self.Host
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return s.Store(ctx, path.Join(leaseDir(instance), safeKey(f.self.ID)), b)
}

// maxLeases bounds the leases read for one instance: one per Caddy of a
// fleet, which has a few.
const maxLeases = 64

// HeldUntil is until when another Caddy of the fleet keeps instance awake
// (zero: none does): the latest, over their leases, of the last use plus
// after (the instance's standby_after) and, for a lease not expired at now
// with requests in flight, its end (a Caddy that died mid-request holds
// the instance no longer than its lease). An error means the leases could
// not be read: the caller keeps the instance awake.
func (f *Fleet) HeldUntil(ctx context.Context, instance string, after time.Duration, now time.Time) (time.Time, error) {
	s := f.store()
	if s == nil {
		return time.Time{}, nil
	}
	keys, err := s.List(ctx, leaseDir(instance), false)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	var until time.Time
	own := safeKey(f.self.ID)
	for i, key := range keys {
		if i == maxLeases {
			break
		}
		if path.Base(key) == own {
			continue
		}
		b, err := s.Load(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return time.Time{}, err
		}
		var l Lease
		if json.Unmarshal(b, &l) != nil {
			continue // unreadable: holds nothing
		}
		if l.LastUse.After(now) {
			l.LastUse = now // a clock ahead holds no longer than standby_after from now
		}
		end := l.LastUse.Add(after)
		if l.InFlight > 0 && now.Before(l.Expires) && l.Expires.After(end) {
			end = l.Expires
		}
		if end.After(until) {
			until = end
		}
	}
	if !until.After(now) {
		return time.Time{}, nil
	}
	return until, nil
}

// OthersInFlight is the sum of the requests in flight the other Caddys'
// leases on instance say, over those not expired at now: the fleet's load
// on it beyond this Caddy's (R5j).
func (f *Fleet) OthersInFlight(ctx context.Context, instance string, now time.Time) (int, error) {
	s := f.store()
	if s == nil {
		return 0, nil
	}
	keys, err := s.List(ctx, leaseDir(instance), false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	own, sum := safeKey(f.self.ID), 0
	for i, key := range keys {
		if i == maxLeases {
			break
		}
		if path.Base(key) == own {
			continue
		}
		b, err := s.Load(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		var l Lease
		if json.Unmarshal(b, &l) == nil && now.Before(l.Expires) && l.InFlight > 0 {
			sum += min(l.InFlight, 1<<20)
		}
	}
	return sum, nil
}

// Release deletes this Caddy's lease on instance (it went down, or is
// forgotten).
func (f *Fleet) Release(ctx context.Context, instance string) error {
	s := f.store()
	if s == nil {
		return nil
	}
	err := s.Delete(ctx, path.Join(leaseDir(instance), safeKey(f.self.ID)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// LeaseEvery is how often a lease on an instance whose standby_after is
// after is written while it is in use: a third of it, between 1 s and a
// minute. LeaseTTL is how long a lease lasts: three writes, and a second.
func LeaseEvery(after time.Duration) time.Duration {
	return min(max(after/3, time.Second), time.Minute)
}

// LeaseTTL is how long a lease renewed every every lasts.
func LeaseTTL(every time.Duration) time.Duration { return 3*every + time.Second }

// Memory is a Storage in this process's memory, shared by the Fleets
// given it: for tests, where it stands for a fleet's shared storage. Fail,
// while set, makes every call fail with it.
type Memory struct {
	mu   sync.Mutex
	data map[string][]byte
	Fail atomic.Pointer[error]
}

// Store implements Storage.
func (m *Memory) Store(_ context.Context, key string, value []byte) error {
	if err := m.failing(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[key] = append([]byte(nil), value...)
	return nil
}

// Load implements Storage.
func (m *Memory) Load(_ context.Context, key string) ([]byte, error) {
	if err := m.failing(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.data[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return append([]byte(nil), b...), nil
}

// Delete implements Storage.
func (m *Memory) Delete(_ context.Context, key string) error {
	if err := m.failing(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.data[key]; !ok {
		return fs.ErrNotExist
	}
	delete(m.data, key)
	return nil
}

// List implements Storage (not recursive: the keys right under dir).
func (m *Memory) List(_ context.Context, dir string, _ bool) ([]string, error) {
	if err := m.failing(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.data {
		if path.Dir(k) == dir {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	sort.Strings(out)
	return out, nil
}

func (m *Memory) failing() error {
	if p := m.Fail.Load(); p != nil {
		return *p
	}
	return nil
}
