package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"path"
)

// The rollouts of one daemon (R4f): one record in the shared storage,
// read and changed by each route's decider under the storage's lock. The
// fleet only moves its bytes; package rollout decodes them, refuses bad
// entries and bounds them (see docs/state.md, "Rollouts (R4f)").

// maxRolloutsBytes bounds the rollouts record read back (rollout.MaxRecordBytes).
const maxRolloutsBytes = 1 << 20

func rolloutsKey(daemon string) string {
	sum := sha256.Sum256([]byte(daemon))
	return path.Join(Prefix, "rollouts", hex.EncodeToString(sum[:12])+".json")
}

// ErrRolloutsHuge is the error of a rollouts record over its bound.
var ErrRolloutsHuge = errors.New("the rollouts record is over 1 MiB")

// LoadRollouts is daemon's rollouts record, nil when none is stored.
func (f *Fleet) LoadRollouts(ctx context.Context, daemon string) ([]byte, error) {
	s := f.store()
	if s == nil {
		return nil, errors.New("no storage shared")
	}
	b, err := s.Load(ctx, rolloutsKey(daemon))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxRolloutsBytes {
		return nil, ErrRolloutsHuge
	}
	return b, nil
}

// UpdateRollouts reads daemon's rollouts record (nil: none), lets change
// make the next one, and stores it unless change returns nil bytes, all
// under the storage's lock if it has one. It returns the record in force
// afterwards.
func (f *Fleet) UpdateRollouts(ctx context.Context, daemon string, change func(raw []byte) ([]byte, error)) ([]byte, error) {
	s := f.store()
	if s == nil {
		return nil, errors.New("no storage shared")
	}
	key := rolloutsKey(daemon)
	if l, ok := lockerOf(s); ok {
		if err := l.Lock(ctx, key); err != nil {
			return nil, err
		}
		defer func() { _ = l.Unlock(context.Background(), key) }()
	}
	raw, err := f.LoadRollouts(ctx, daemon)
	if err != nil && !errors.Is(err, ErrRolloutsHuge) {
		return nil, err
	}
	next, err := change(raw)
	if err != nil || next == nil {
		return raw, err
	}
	return next, s.Store(ctx, key, next)
}
