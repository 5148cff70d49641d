package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"
)

// The runtime switches of one daemon (R4e): weights and maintenance an
// operator set through the admin API of any Caddy of the fleet, kept in
// one record of the shared storage, which every Caddy reads once a second
// and applies to its catalog.

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

// MaxWeightSwitches bounds the runtime weights kept per daemon.
const MaxWeightSwitches = 10000

func switchesKey(daemon string) string {
	sum := sha256.Sum256([]byte(daemon))
	return path.Join(Prefix, "switches", hex.EncodeToString(sum[:12])+".json")
}

// LoadSwitches reads the switches of daemon (its kind and address), and
// the record's bytes, by which a caller sees it unchanged. None stored:
// empty Switches, nil bytes.
func (f *Fleet) LoadSwitches(ctx context.Context, daemon string) (Switches, []byte, error) {
	s := f.store()
	if s == nil {
		return Switches{}, nil, nil
	}
	b, err := s.Load(ctx, switchesKey(daemon))
	if errors.Is(err, fs.ErrNotExist) {
		return Switches{}, nil, nil
	}
	if err != nil {
		return Switches{}, nil, err
	}
	if len(b) > maxSwitchesBytes {
		return Switches{}, nil, fmt.Errorf("the switches record of %s is %d bytes, over %d", daemon, len(b), maxSwitchesBytes)
	}
	var out Switches
	if err := json.Unmarshal(b, &out); err != nil {
		return Switches{}, nil, fmt.Errorf("the switches record of %s: %w", daemon, err)
	}
	return out, b, nil
}

// Locker is what a storage that can lock has (certmagic.Storage does):
// UpdateSwitches holds the lock while it reads, changes and writes.
type Locker interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// UpdateSwitches reads daemon's switches, lets change change them, and
// writes them back, under the storage's lock if it has one; it returns
// the record written.
func (f *Fleet) UpdateSwitches(ctx context.Context, daemon string, change func(*Switches)) ([]byte, error) {
	s := f.store()
	if s == nil {
		return nil, errors.New("no storage shared")
	}
	key := switchesKey(daemon)
	if l, ok := s.(Locker); ok {
		if err := l.Lock(ctx, key); err != nil {
			return nil, err
		}
		defer func() { _ = l.Unlock(context.Background(), key) }()
	}
	sw, _, err := f.LoadSwitches(ctx, daemon)
	if err != nil {
		return nil, err
	}
	change(&sw)
	if len(sw.Weights) > MaxWeightSwitches {
		return nil, fmt.Errorf("over %d runtime weights on %s", MaxWeightSwitches, daemon)
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
