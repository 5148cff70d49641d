package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// StatMemory is a Memory that is also a Stater, as a file system is: a
// key's modification time is its last Store's, truncated to Granularity
// (0: to the nanosecond), on the clock Now (nil: time.Now). It counts its
// Loads and Stats. For tests.
type StatMemory struct {
	Memory
	Granularity time.Duration
	Now         func() time.Time

	mu       sync.Mutex
	modified map[string]time.Time
	loads    atomic.Int64
	stats    atomic.Int64
}

// Store implements Storage.
func (m *StatMemory) Store(ctx context.Context, key string, value []byte) error {
	if err := m.Memory.Store(ctx, key, value); err != nil {
		return err
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.modified == nil {
		m.modified = map[string]time.Time{}
	}
	m.modified[key] = now().Truncate(m.Granularity)
	return nil
}

// Load implements Storage.
func (m *StatMemory) Load(ctx context.Context, key string) ([]byte, error) {
	m.loads.Add(1)
	return m.Memory.Load(ctx, key)
}

// Delete implements Storage.
func (m *StatMemory) Delete(ctx context.Context, key string) error {
	if err := m.Memory.Delete(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.modified, key)
	return nil
}

// Stat implements Stater.
func (m *StatMemory) Stat(ctx context.Context, key string) (KeyInfo, error) {
	m.stats.Add(1)
	b, err := m.Memory.Load(ctx, key)
	if err != nil {
		return KeyInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return KeyInfo{Modified: m.modified[key], Size: int64(len(b))}, nil
}

// Loads and Stats count the calls so far.
func (m *StatMemory) Loads() int64 { return m.loads.Load() }

// Stats counts the Stat calls so far.
func (m *StatMemory) Stats() int64 { return m.stats.Load() }
