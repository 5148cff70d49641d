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
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
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

// leasesRoot holds a folder per instance, a lease per Caddy in it.
var leasesRoot = path.Join(Prefix, "leases")

// Self names this Caddy in the fleet: ID is its instance ID (Caddy's
// caddy.InstanceID, kept in its data directory), Host its host name, for
// people, and Process its process: every Fleet of one process must be
// given the same (its connections write as one Caddy), and two processes
// different ones, even with one ID (two Caddys that share a data
// directory). Empty: a token of the Fleet's own, as if another process.
type Self struct {
	ID, Host, Process string
}

// Lease is what one Caddy of the fleet says of one instance it routes to.
type Lease struct {
	// Caddy is the writer's Self.ID, Host its host name, Process the
	// writer's process (a random token made at its start): two Caddys
	// that share a data directory share an ID, not a process.
	Caddy   string `json:"caddy"`
	Host    string `json:"host,omitempty"`
	Process string `json:"process,omitempty"`
	// LastUse is when the writer last routed a request or connection to
	// the instance (its wall clock).
	LastUse time.Time `json:"last_use"`
	// InFlight is how many of those were in flight when it wrote.
	InFlight int `json:"in_flight"`
	// Expires is when the lease ends unless renewed: a Caddy that died
	// holds nothing awake past it.
	Expires time.Time `json:"expires"`
	// Until, if set, is the last moment the lease means anything (its
	// last use plus the writer's standby_after, when later than
	// Expires): past it and Expires, any Caddy may remove it.
	Until time.Time `json:"until,omitempty"`
}

// Hooks are who hears what the fleet does; each may be nil.
type Hooks struct {
	// Logger hears, once per writer, the leases refused, and once per
	// process, another live Caddy with this one's instance ID.
	Logger *zap.Logger
	// Call hears every call of the storage, by op: store, load, delete,
	// list, lock, unlock, stat.
	Call func(op string)
	// Refused hears every lease refused, once per version of it, by
	// reason: future (dated ahead of this Caddy's clock beyond what a
	// writer writes) or corrupt (unreadable, oversized, absurd counts).
	Refused func(reason string)
}

// Fleet is this Caddy's view of its fleet, through the storage last set.
// The zero Fleet has no storage: it writes nothing and holds nothing.
type Fleet struct {
	self Self
	// proc is this process's token, ownKey the name of its leases.
	proc, ownKey string
	started      time.Time
	storage      atomic.Pointer[storageBox]
	hooks        atomic.Pointer[Hooks]

	mu sync.Mutex
	// owned are the instances this process holds a lease on, for
	// ReleaseAll.
	owned map[string]struct{}
	// seen is when this Caddy first read each lease it refuses or
	// honours only for a while (from the future), by key and version;
	// at most maxSeen.
	seen map[string]seenLease
	// warned are the writers (a lease's file name) and processes warned
	// of, at most maxWarned.
	warned map[string]bool
	// sweepFrom is the folder the next Sweep starts after.
	sweepFrom string
	// due are the leases from the future a Sweep read, by key, each with
	// when it stops holding: SweepDue removes them then; at most maxSeen.
	due map[string]time.Time
}

type seenLease struct {
	sum uint64
	at  time.Time
}

type storageBox struct{ s Storage }

// New is the fleet of self, with no storage yet.
func New(self Self) *Fleet {
	if self.Process == "" {
		self.Process = NewProcess()
	}
	proc := safeKey(self.Process)
	return &Fleet{
		self: self, proc: proc, ownKey: safeKey(self.ID) + "-" + proc, started: time.Now(),
		owned: map[string]struct{}{}, seen: map[string]seenLease{}, warned: map[string]bool{}, due: map[string]time.Time{},
	}
}

// NewProcess is a token for Self.Process: made once per process.
func NewProcess() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Self is this Caddy.
func (f *Fleet) Self() Self { return f.self }

// SetHooks makes h the fleet's hooks.
func (f *Fleet) SetHooks(h Hooks) { f.hooks.Store(&h) }

func (f *Fleet) hook() *Hooks {
	if h := f.hooks.Load(); h != nil {
		return h
	}
	return &Hooks{}
}

// SetStorage makes s the storage the fleet shares (a config load's
// storage: the last load wins); nil stops sharing. Every call the fleet
// makes of it is counted (Hooks.Call).
func (f *Fleet) SetStorage(s Storage) {
	if s == nil {
		f.storage.Store(nil)
		return
	}
	f.storage.Store(&storageBox{counted(s, f.countCall)})
}

func (f *Fleet) countCall(op string) {
	if h := f.hook(); h.Call != nil {
		h.Call(op)
	}
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

func leaseDir(instance string) string { return path.Join(leasesRoot, safeKey(instance)) }

// Publish writes this Caddy's lease on instance.
func (f *Fleet) Publish(ctx context.Context, instance string, l Lease) error {
	s := f.store()
	if s == nil {
		return nil
	}
	l.Caddy, l.Host, l.Process = f.self.ID, f.self.Host, f.proc
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := s.Store(ctx, path.Join(leaseDir(instance), f.ownKey), b); err != nil {
		return fmt.Errorf("writing the lease on %s: %w", instance, err)
	}
	f.mu.Lock()
	f.owned[instance] = struct{}{}
	f.mu.Unlock()
	return nil
}

// Bounds of what a reader believes and does (R5m).
const (
	// maxLeaseBytes bounds a lease read; a larger one is corrupt.
	maxLeaseBytes = 4 << 10
	// MaxInFlight bounds the requests in flight a lease may say; more is
	// corrupt.
	MaxInFlight = 1 << 16
	// clockSlack is how far ahead of the reader's clock a last use may
	// be before the lease is from the future.
	clockSlack = 2 * time.Second
	// maxUntilAhead bounds how far ahead a lease's Until may be (a
	// standby_after longer than this is not believed).
	maxUntilAhead = 30 * 24 * time.Hour
	// RemoveGrace is how long past its end a lease stays before a reader
	// removes it (a writer's clock may lag), and how long a corrupt one
	// is seen before it is removed.
	RemoveGrace = time.Minute
	// maxRemovals bounds the leases one read removes: a folder full of
	// dead leases is emptied over several reads.
	maxRemovals = 16
	// maxSeen and maxWarned bound what a reader remembers of suspicious
	// leases and writers.
	maxSeen, maxWarned = 4096, 1024
)

// maxTTL is the longest lease a writer gives (LeaseTTL of the longest
// LeaseEvery): an Expires further ahead is from the future.
var maxTTL = LeaseTTL(LeaseEvery(time.Hour))

// verdict is what a reader makes of one lease.
type verdict int

const (
	honoured verdict = iota
	refused
	dead // holds nothing, and may be removed
)

// reading is a lease as a reader believes it: cap, if set, is when a
// lease from the future stops holding anything (one TTL after this
// reader first saw it).
type reading struct {
	Lease
	cap time.Time
}

// judge reads the lease at key, b, at now for an instance whose
// standby_after is after (0: unknown).
func (f *Fleet) judge(key string, b []byte, after time.Duration, now time.Time) (reading, verdict) {
	var r reading
	if len(b) > maxLeaseBytes || json.Unmarshal(b, &r.Lease) != nil || r.InFlight < 0 || r.InFlight > MaxInFlight ||
		r.Expires.IsZero() || r.LastUse.IsZero() {
		first, fresh := f.firstSeen(key, b, now)
		if fresh {
			f.refuse(key, r.Lease, "corrupt", "a lease of the fleet's storage is unreadable or absurd: refused")
		}
		if now.Sub(first) > RemoveGrace {
			return r, dead
		}
		return r, refused
	}
	ttl := LeaseTTL(LeaseEvery(after))
	if r.LastUse.After(now.Add(clockSlack)) || r.Expires.After(now.Add(maxTTL+clockSlack)) || r.Until.After(now.Add(maxUntilAhead)) {
		first, fresh := f.firstSeen(key, b, now)
		if fresh {
			f.refuse(key, r.Lease, "future", "a lease of the fleet's storage is dated ahead of this Caddy's clock: "+
				"it holds for one lease time at most (keep the fleet's clocks in sync)")
		}
		r.cap = first.Add(ttl)
		r.LastUse = minTime(r.LastUse, first)
		r.Expires = minTime(r.Expires, r.cap)
		r.Until = time.Time{}
		if !now.Before(r.cap) {
			// Refused from here on whatever its writer's clock says:
			// removing it loses nothing, and a writer still using the
			// instance writes it again.
			return r, dead
		}
		return r, honoured
	}
	end := maxTime(r.Expires, r.Until)
	if after > 0 {
		end = maxTime(end, r.LastUse.Add(after))
	}
	if now.After(end.Add(RemoveGrace)) {
		return r, dead
	}
	if r.Caddy == f.self.ID && r.Process != "" && r.Process != f.proc && r.LastUse.After(f.started) {
		f.warnOnce("process "+r.Process, "another live Caddy has this Caddy's instance ID: they share a data "+
			"directory; give each Caddy its own (its certificates stay in the shared storage)",
			zap.String("host", r.Host), zap.String("process", r.Process), zap.String("own_process", f.proc))
	}
	return r, honoured
}

// firstSeen is when this Caddy first read the lease at key as b (fresh:
// now, for the first time). Past maxSeen remembered, a lease counts as
// seen long ago: it is honoured no more.
func (f *Fleet) firstSeen(key string, b []byte, now time.Time) (at time.Time, fresh bool) {
	h := fnv.New64a()
	_, _ = h.Write(b)
	sum := h.Sum64()
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.seen[key]; ok && s.sum == sum {
		return s.at, false
	}
	if len(f.seen) >= maxSeen {
		return now.Add(-maxTTL - RemoveGrace), true
	}
	f.seen[key] = seenLease{sum, now}
	return now, true
}

// refuse counts a refused lease and warns once per writer.
func (f *Fleet) refuse(key string, l Lease, reason, msg string) {
	if h := f.hook(); h.Refused != nil {
		h.Refused(reason)
	}
	f.warnOnce(path.Base(key), msg, zap.String("key", key), zap.String("reason", reason),
		zap.String("caddy", l.Caddy), zap.String("host", l.Host), zap.Time("last_use", l.LastUse),
		zap.Time("expires", l.Expires), zap.Int("in_flight", l.InFlight))
}

// warnOnce logs msg the first time for who.
func (f *Fleet) warnOnce(who, msg string, fields ...zap.Field) {
	f.mu.Lock()
	first := !f.warned[who] && len(f.warned) < maxWarned
	if first {
		f.warned[who] = true
	}
	f.mu.Unlock()
	if log := f.hook().Logger; first && log != nil {
		log.Warn(msg, fields...)
	}
}

// forget drops what the reader remembers of the lease at key, removed.
func (f *Fleet) forget(key string) {
	f.mu.Lock()
	delete(f.seen, key)
	delete(f.due, key)
	f.mu.Unlock()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// readLeases calls visit with every lease of the other Caddys on instance
// that it honours, whatever their count; on the way it removes up to
// maxRemovals dead ones (ended RemoveGrace ago, or corrupt since). An
// error means the leases could not be listed or read. The folder is
// listed up to lists times while the list says it does not exist: a file
// storage's List says so too when a lease in it goes while it walks the
// folder (a sweep removed a dead one), though the live ones are there.
func (f *Fleet) readLeases(ctx context.Context, s Storage, instance string, after time.Duration, now time.Time, lists int, visit func(reading)) error {
	keys, err := listTried(ctx, s, leaseDir(instance), lists)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the leases on %s: %w", instance, err)
	}
	removed := 0
	for _, key := range keys {
		if path.Base(key) == f.ownKey {
			continue
		}
		b, err := s.Load(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("reading the lease %s: %w", key, err)
		}
		r, v := f.judge(key, b, after, now)
		switch {
		case v == honoured:
			visit(r)
		case v == dead && removed < maxRemovals:
			removed++
			// A failed removal is tried again at the next read: the read
			// itself worked.
			if err := s.Delete(ctx, key); err == nil || errors.Is(err, fs.ErrNotExist) {
				f.forget(key)
			}
		}
	}
	return nil
}

// HeldUntil is until when another Caddy of the fleet keeps instance awake
// (zero: none does): the latest, over their leases, of the last use plus
// after (the instance's standby_after) and, for a lease not expired at now
// with requests in flight, its end (a Caddy that died mid-request holds
// the instance no longer than its lease). A lease dated ahead of now holds
// for one lease time from when this Caddy first read it, at most. An error
// means the leases could not be read: the caller keeps the instance awake.
func (f *Fleet) HeldUntil(ctx context.Context, instance string, after time.Duration, now time.Time) (time.Time, error) {
	s := f.store()
	if s == nil {
		return time.Time{}, nil
	}
	var until time.Time
	// Three lists: a lease missed here lets this Caddy put on standby an
	// instance another one holds; an instance no Caddy leased costs three.
	err := f.readLeases(ctx, s, instance, after, now, 3, func(l reading) {
		end := l.LastUse.Add(after)
		if l.InFlight > 0 && now.Before(l.Expires) && l.Expires.After(end) {
			end = l.Expires
		}
		if !l.cap.IsZero() && end.After(l.cap) {
			end = l.cap
		}
		if end.After(until) {
			until = end
		}
	})
	if err != nil {
		return time.Time{}, err
	}
	if !until.After(now) {
		return time.Time{}, nil
	}
	return until, nil
}

// OthersInFlight is the sum of the requests in flight the other Caddys'
// leases on instance say, over those not expired at now: the fleet's load
// on it beyond this Caddy's (R5j). after is the instance's standby_after
// (0: none), by which a lease past its Expires still counts as alive.
func (f *Fleet) OthersInFlight(ctx context.Context, instance string, after time.Duration, now time.Time) (int, error) {
	s := f.store()
	if s == nil {
		return 0, nil
	}
	sum := 0
	// One list: read again every second, a load missed once is the next
	// second's.
	err := f.readLeases(ctx, s, instance, after, now, 1, func(l reading) {
		if now.Before(l.Expires) && l.InFlight > 0 {
			sum += l.InFlight
		}
	})
	if err != nil {
		return 0, err
	}
	return sum, nil
}

// Release deletes this Caddy's lease on instance (it went down, is
// forgotten, or this Caddy stops).
func (f *Fleet) Release(ctx context.Context, instance string) error {
	s := f.store()
	if s == nil {
		return nil
	}
	f.mu.Lock()
	delete(f.owned, instance)
	f.mu.Unlock()
	err := s.Delete(ctx, path.Join(leaseDir(instance), f.ownKey))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("releasing the lease on %s: %w", instance, err)
	}
	return nil
}

// ReleaseAll deletes every lease this process holds: when what wrote
// them stops for good (its connection closes, Caddy stops), not at a
// config reload that keeps the connection.
func (f *Fleet) ReleaseAll(ctx context.Context) error {
	f.mu.Lock()
	ids := make([]string, 0, len(f.owned))
	for id := range f.owned {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := f.Release(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Forget removes the lease folder of instance, gone from the daemon (its
// ID is never used again): this Caddy's lease and any other Caddy's,
// which no longer mean anything.
func (f *Fleet) Forget(ctx context.Context, instance string) error {
	s := f.store()
	if s == nil {
		return nil
	}
	f.mu.Lock()
	delete(f.owned, instance)
	f.mu.Unlock()
	if err := s.Delete(ctx, leaseDir(instance)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the lease folder of %s: %w", instance, err)
	}
	return nil
}

// SweepFolders bounds the lease folders one Sweep looks at.
const SweepFolders = 64

// Sweep looks at up to SweepFolders lease folders, after those the last
// Sweep looked at (the whole tree over several sweeps), removes their
// dead leases (as a reader does, with the leases' own Until) and the
// folders found empty: the folders of instances gone while no Caddy that
// leased them ran. It returns the garbage it found: the leases and folders
// it removed, and the leases it refused (corrupt), which a sweep removes
// once they are dead. A lease from the future that still holds its lease
// time is noted instead, for SweepDue to remove once it stops holding.
func (f *Fleet) Sweep(ctx context.Context, now time.Time) (garbage int, err error) {
	removed, pending := 0, 0
	defer func() { garbage = removed + pending }()
	s := f.store()
	if s == nil {
		return 0, nil
	}
	dirs, err := listRoot(ctx, s)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing the lease folders: %w", err)
	}
	sort.Strings(dirs)
	f.mu.Lock()
	from := f.sweepFrom
	f.mu.Unlock()
	start := sort.SearchStrings(dirs, from)
	if start < len(dirs) && dirs[start] == from {
		start++
	}
	if start >= len(dirs) {
		start = 0
	}
	var last string
	for i := 0; i < min(SweepFolders, len(dirs)); i++ {
		dir := dirs[(start+i)%len(dirs)]
		last = dir
		keys, err := s.List(ctx, dir, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("listing the lease folder %s: %w", dir, err)
		}
		if len(keys) == 0 {
			if err := s.Delete(ctx, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("removing the empty lease folder %s: %w", dir, err)
			}
			removed++
			continue
		}
		n := 0
		for _, key := range keys {
			if n == maxRemovals {
				break
			}
			b, err := s.Load(ctx, key)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return removed, fmt.Errorf("reading the lease %s: %w", key, err)
			}
			switch r, v := f.judge(key, b, 0, now); {
			case v == dead:
				if err := s.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return removed, fmt.Errorf("removing the dead lease %s: %w", key, err)
				}
				f.forget(key)
				n++
			case v == refused:
				pending++
			case !r.cap.IsZero():
				// From the future, holding until its cap: removed then.
				f.dueAt(key, r.cap)
			}
		}
		removed += n
		if n == len(keys) {
			// Emptied now: the folder goes in this pass, not the next.
			if err := s.Delete(ctx, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("removing the emptied lease folder %s: %w", dir, err)
			}
			removed++
		}
	}
	f.mu.Lock()
	f.sweepFrom = last
	f.prune(now)
	f.mu.Unlock()
	return removed, nil
}

// listRoot lists the lease folders. A file storage's List fails with
// ErrNotExist when a folder goes while it walks the root (its instance's
// writer or another Caddy removed it), which a busy fleet does every
// second: that is tried again, three lists in all, before the root is
// taken as absent.
func listRoot(ctx context.Context, s Storage) (dirs []string, err error) {
	return listTried(ctx, s, leasesRoot, 3)
}

// listTried lists dir (not recursively) up to tries times (at least
// once) while the list fails with ErrNotExist, which a file storage's List
// also says when an entry goes while it walks dir.
func listTried(ctx context.Context, s Storage, dir string, tries int) (keys []string, err error) {
	for range max(tries, 1) {
		if keys, err = s.List(ctx, dir, false); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return keys, err
}

// dueAt notes the lease at key, from the future, for SweepDue at at.
func (f *Fleet) dueAt(key string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.due[key]; ok || len(f.due) < maxSeen {
		f.due[key] = at
	}
}

// NextDue is when SweepDue next has a lease to look at (zero: none).
func (f *Fleet) NextDue() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for _, at := range f.due {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// SweepDue looks again at the leases from the future a Sweep read whose
// lease time is over at now, and removes those that hold nothing now,
// with their folder once empty: a lease from the future goes one lease
// time after a sweep first read it, at the cost of a few storage calls
// each, not of another sweep of the whole tree. One gone meanwhile (its
// writer removed its instance's folder) is forgotten; one rewritten from
// the future again waits for its own lease time. It returns how many it
// removed; on an error of the storage, the rest wait for the next call.
func (f *Fleet) SweepDue(ctx context.Context, now time.Time) (removed int, err error) {
	s := f.store()
	if s == nil {
		return 0, nil
	}
	f.mu.Lock()
	var keys []string
	for key, at := range f.due {
		if !at.After(now) {
			keys = append(keys, key)
		}
	}
	f.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		b, err := s.Load(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			f.forget(key)
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("reading the lease %s: %w", key, err)
		}
		switch r, v := f.judge(key, b, 0, now); {
		case v == dead:
			if err := s.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("removing the lease from the future %s: %w", key, err)
			}
			f.forget(key)
			removed++
			dir := path.Dir(key)
			if rest, err := s.List(ctx, dir, false); err == nil && len(rest) == 0 {
				if err := s.Delete(ctx, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return removed, fmt.Errorf("removing the emptied lease folder %s: %w", dir, err)
				}
			}
		case !r.cap.IsZero():
			f.dueAt(key, r.cap)
		default: // no longer from the future: a reader's to judge
			f.mu.Lock()
			delete(f.due, key)
			f.mu.Unlock()
		}
	}
	return removed, nil
}

// prune forgets the suspicious leases seen long ago (removed by now, or
// dead); f.mu is held.
func (f *Fleet) prune(now time.Time) {
	for k, s := range f.seen {
		if now.Sub(s.at) > maxTTL+2*RemoveGrace {
			delete(f.seen, k)
		}
	}
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

// Delete implements Storage: a key, or a folder and every key under it
// (as a file storage removes a folder).
func (m *Memory) Delete(_ context.Context, key string) error {
	if err := m.failing(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	found := false
	for k := range m.data {
		if k == key || strings.HasPrefix(k, key+"/") {
			delete(m.data, k)
			found = true
		}
	}
	if !found {
		return fs.ErrNotExist
	}
	return nil
}

// List implements Storage (not recursive: the keys and folders right
// under dir).
func (m *Memory) List(_ context.Context, dir string, _ bool) ([]string, error) {
	if err := m.failing(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k := range m.data {
		rest, ok := strings.CutPrefix(k, dir+"/")
		if !ok {
			continue
		}
		child, _, _ := strings.Cut(rest, "/")
		if child = path.Join(dir, child); !seen[child] {
			seen[child] = true
			out = append(out, child)
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
