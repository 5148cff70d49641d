package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// The runtime switches of one daemon (R4e): weights and maintenance an
// operator set through the admin API of any Caddy of the fleet, kept in
// one record of the shared storage, which every Caddy reads once a second
// (an unchanged record is neither decoded nor, with a Stater, loaded) and
// applies to its catalog. Each Caddy whose catalog is synced with its
// daemon removes the weights of instances gone from it (see the
// connection's pruning); when the record is full, the oldest weights of
// gone instances make room for a new one.

// WeightSwitch is a runtime weight (R4c) set on one instance.
type WeightSwitch struct {
	Weight int `json:"weight"`
	// Name is the instance's name when it was set, for people.
	Name string `json:"name,omitempty"`
	// From is the Self.ID of the Caddy it was set through, Host its host
	// name, At when.
	From string    `json:"from"`
	Host string    `json:"host,omitempty"`
	At   time.Time `json:"at"`
}

// MaintenanceSwitch is a selector put in maintenance (R5i).
type MaintenanceSwitch struct {
	Selector string    `json:"selector"`
	Message  string    `json:"message,omitempty"`
	From     string    `json:"from"`
	Host     string    `json:"host,omitempty"`
	At       time.Time `json:"at"`
}

// Switches are a daemon's runtime switches: weights by instance ID, and
// the selectors in maintenance.
type Switches struct {
	Weights     map[string]WeightSwitch `json:"weights,omitempty"`
	Maintenance []MaintenanceSwitch     `json:"maintenance,omitempty"`
}

// maxSwitchesBytes bounds a switches record read back.
const maxSwitchesBytes = 4 << 20

// MaxWeightSwitches bounds the runtime weights kept per daemon: a weight
// more is refused with ErrFull once no weight of a gone instance is left
// to make room (MakeRoom).
const MaxWeightSwitches = 10000

// MaxSwitchName bounds the instance name kept beside a weight (a
// daemon's, so a tenant's): a record of MaxWeightSwitches weights stays
// under maxSwitchesBytes.
const MaxSwitchName = 128

// ErrFull is the error of a change that would keep more than
// MaxWeightSwitches runtime weights on a daemon.
var ErrFull = fmt.Errorf("over %d runtime weights on the daemon", MaxWeightSwitches)

func switchesKey(daemon string) string {
	sum := sha256.Sum256([]byte(daemon))
	return path.Join(Prefix, "switches", hex.EncodeToString(sum[:12])+".json")
}

// LoadSwitches reads the switches of daemon (its kind and address), and
// the record's bytes. None stored: empty Switches, nil bytes.
func (f *Fleet) LoadSwitches(ctx context.Context, daemon string) (Switches, []byte, error) {
	b, err := f.loadRecord(ctx, daemon)
	if err != nil || b == nil {
		return Switches{}, nil, err
	}
	sw, err := decodeSwitches(daemon, b)
	if err != nil {
		return Switches{}, nil, err
	}
	return sw, b, nil
}

// loadRecord is the switches record of daemon, nil when none is stored.
func (f *Fleet) loadRecord(ctx context.Context, daemon string) ([]byte, error) {
	s := f.store()
	if s == nil {
		return nil, nil
	}
	b, err := s.Load(ctx, switchesKey(daemon))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxSwitchesBytes {
		return nil, fmt.Errorf("the switches record of %s is %d bytes, over %d", daemon, len(b), maxSwitchesBytes)
	}
	return b, nil
}

func decodeSwitches(daemon string, b []byte) (Switches, error) {
	var out Switches
	if err := json.Unmarshal(b, &out); err != nil {
		return Switches{}, fmt.Errorf("the switches record of %s: %w", daemon, err)
	}
	return out, nil
}

// KeyInfo is what a storage says of a key without loading it: the part
// of certmagic.KeyInfo the fleet reads.
type KeyInfo struct {
	// Modified is when the key was last written, by the storage's clock
	// and to its granularity (zero: it cannot say).
	Modified time.Time
	Size     int64
}

// Stater is a storage that can say when a key was last written without
// loading it (certmagic.Storage's Stat, which the root adapts): a
// SwitchesReader then loads the record only when it changed.
type Stater interface {
	Stat(ctx context.Context, key string) (KeyInfo, error)
}

// StatGranularity is how long after a reader first sees a record's
// KeyInfo it still loads the record once more: writes within the
// storage's granularity of modification times (2 s on FAT, 1 s on some
// network file systems) leave the same KeyInfo, and all of them are done
// by then.
const StatGranularity = 2 * time.Second

// SwitchesReader reads a daemon's switches record again and again, and
// tells an unchanged record by its bytes, before decoding it, or, with a
// storage that is a Stater, by its KeyInfo, before loading it. Its zero
// value is not usable: make it with NewSwitchesReader. It is not safe for
// concurrent use.
type SwitchesReader struct {
	daemon string
	// read is set once a Read got an answer; last is the record then (nil:
	// none stored).
	read bool
	last []byte
	// info is the record's KeyInfo at the last Stat that differed,
	// infoSince when that Stat was made, and settled is set once a Load
	// made StatGranularity after it still had that KeyInfo: from then on
	// the same KeyInfo is the same record.
	info      KeyInfo
	infoSince time.Time
	settled   bool
	// loads and decodes count the records loaded and decoded.
	loads, decodes int
}

// NewSwitchesReader is a reader of daemon's switches.
func NewSwitchesReader(daemon string) *SwitchesReader { return &SwitchesReader{daemon: daemon} }

// Read reads the record through f's storage at now. changed is false when
// it is the record the last Read returned or Wrote was told; sw and raw
// are then zero. None stored is empty Switches with nil raw, a change
// only after a record.
func (r *SwitchesReader) Read(ctx context.Context, f *Fleet, now time.Time) (sw Switches, raw []byte, changed bool, err error) {
	if same := r.unchanged(ctx, f.store(), now); same && r.read {
		return Switches{}, nil, false, nil
	}
	b, err := f.loadRecord(ctx, r.daemon)
	if err != nil {
		return Switches{}, nil, false, err
	}
	r.loads++
	if r.read && bytes.Equal(b, r.last) && (b == nil) == (r.last == nil) {
		return Switches{}, nil, false, nil
	}
	if b == nil {
		r.read, r.last = true, nil
		return Switches{}, nil, true, nil
	}
	r.decodes++
	if sw, err = decodeSwitches(r.daemon, b); err != nil {
		return Switches{}, nil, false, err
	}
	r.read, r.last = true, b
	return sw, b, true, nil
}

// unchanged reports whether the storage's Stat says the record is the
// one read last; false when it cannot say.
func (r *SwitchesReader) unchanged(ctx context.Context, s Storage, now time.Time) bool {
	st, ok := staterOf(s)
	if !ok {
		return false
	}
	info, err := st.Stat(ctx, switchesKey(r.daemon))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r.last == nil
	case err != nil || info.Modified.IsZero():
		return false
	case !info.Modified.Equal(r.info.Modified) || info.Size != r.info.Size:
		r.info, r.infoSince, r.settled = info, now, false
		return false
	case r.settled:
		return true
	}
	// The same KeyInfo as the last Stat's: once StatGranularity has
	// passed since, every write that leaves it is done, and this Load
	// reads the last of them.
	r.settled = now.Sub(r.infoSince) >= StatGranularity
	return false
}

// Wrote tells r that raw is the record now stored (this Caddy just wrote
// it): the next Read loads it again only to find it unchanged.
func (r *SwitchesReader) Wrote(raw []byte) {
	r.read, r.last = true, raw
	r.info, r.settled = KeyInfo{}, false
}

// Counts are how many records r loaded and decoded.
func (r *SwitchesReader) Counts() (loads, decodes int) { return r.loads, r.decodes }

// DropWeights deletes the weights of the IDs in ids, and returns those it
// deleted.
func (sw *Switches) DropWeights(ids []string) []string {
	var out []string
	for _, id := range ids {
		if _, ok := sw.Weights[id]; ok {
			delete(sw.Weights, id)
			out = append(out, id)
		}
	}
	return out
}

// MakeRoom deletes, while sw holds more than MaxWeightSwitches weights,
// the oldest of those gone reports (by their At, a time after now counting
// as now), and returns the IDs deleted; ErrFull if that is not enough.
func (sw *Switches) MakeRoom(now time.Time, gone func(id string) bool) ([]string, error) {
	over := len(sw.Weights) - MaxWeightSwitches
	if over <= 0 {
		return nil, nil
	}
	type aged struct {
		id string
		at time.Time
	}
	var cands []aged
	for id, w := range sw.Weights {
		if gone(id) {
			cands = append(cands, aged{id, minTime(w.At, now)})
		}
	}
	slices.SortFunc(cands, func(a, b aged) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]string, 0, min(over, len(cands)))
	for _, c := range cands[:min(over, len(cands))] {
		delete(sw.Weights, c.id)
		out = append(out, c.id)
	}
	if len(sw.Weights) > MaxWeightSwitches {
		return out, ErrFull
	}
	return out, nil
}

// Locker is what a storage that can lock has (certmagic.Storage does):
// UpdateSwitches holds the lock while it reads, changes and writes.
type Locker interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// UpdateSwitches reads daemon's switches, lets change change them, and
// writes them back, under the storage's lock if it has one; it returns
// the record written. An error of change writes nothing and is returned;
// so is ErrFull (wrapped) when the change leaves over MaxWeightSwitches
// weights.
func (f *Fleet) UpdateSwitches(ctx context.Context, daemon string, change func(*Switches) error) ([]byte, error) {
	s := f.store()
	if s == nil {
		return nil, errors.New("no storage shared")
	}
	key := switchesKey(daemon)
	if l, ok := lockerOf(s); ok {
		if err := l.Lock(ctx, key); err != nil {
			return nil, err
		}
		defer func() { _ = l.Unlock(context.Background(), key) }()
	}
	sw, _, err := f.LoadSwitches(ctx, daemon)
	if err != nil {
		return nil, err
	}
	if err := change(&sw); err != nil {
		return nil, err
	}
	if len(sw.Weights) > MaxWeightSwitches {
		return nil, fmt.Errorf("%s: %w", daemon, ErrFull)
	}
	b, err := json.Marshal(sw)
	if err != nil {
		return nil, err
	}
	return b, s.Store(ctx, key, b)
}

// Stamp is a switch's origin now: this Caddy and the time.
func (f *Fleet) Stamp() (from, host string, at time.Time) {
	return f.self.ID, f.self.Host, time.Now().UTC().Round(time.Millisecond)
}
