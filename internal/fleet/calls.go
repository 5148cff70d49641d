package fleet

import "context"

// countedStorage is the storage a Fleet is given, every call of which is
// heard by call (Hooks.Call), so that a Caddy's /metrics says how many
// calls the fleet makes of its storage, by op. What the storage can do
// beyond Storage (Locker, Stater) is found through lockerOf and staterOf,
// which see through the count.
type countedStorage struct {
	s    Storage
	call func(op string)
}

func counted(s Storage, call func(op string)) Storage { return &countedStorage{s, call} }

func (c *countedStorage) Store(ctx context.Context, key string, value []byte) error {
	c.call("store")
	return c.s.Store(ctx, key, value)
}

func (c *countedStorage) Load(ctx context.Context, key string) ([]byte, error) {
	c.call("load")
	return c.s.Load(ctx, key)
}

func (c *countedStorage) Delete(ctx context.Context, key string) error {
	c.call("delete")
	return c.s.Delete(ctx, key)
}

func (c *countedStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	c.call("list")
	return c.s.List(ctx, dir, recursive)
}

// countedLocker counts the lock calls of a counted storage that can lock.
type countedLocker struct {
	c *countedStorage
	l Locker
}

func (c countedLocker) Lock(ctx context.Context, name string) error {
	c.c.call("lock")
	return c.l.Lock(ctx, name)
}

func (c countedLocker) Unlock(ctx context.Context, name string) error {
	c.c.call("unlock")
	return c.l.Unlock(ctx, name)
}

// countedStater counts the Stat calls of a counted storage that can Stat.
type countedStater struct {
	c  *countedStorage
	st Stater
}

func (c countedStater) Stat(ctx context.Context, key string) (KeyInfo, error) {
	c.c.call("stat")
	return c.st.Stat(ctx, key)
}

// lockerOf is s's lock, if it has one (through the count).
func lockerOf(s Storage) (Locker, bool) {
	if c, ok := s.(*countedStorage); ok {
		l, ok := c.s.(Locker)
		if !ok {
			return nil, false
		}
		return countedLocker{c, l}, true
	}
	l, ok := s.(Locker)
	return l, ok
}

// staterOf is s's Stat, if it has one (through the count).
func staterOf(s Storage) (Stater, bool) {
	if c, ok := s.(*countedStorage); ok {
		st, ok := c.s.(Stater)
		if !ok {
			return nil, false
		}
		return countedStater{c, st}, true
	}
	st, ok := s.(Stater)
	return st, ok
}

// Interface guards
var (
	_ Storage = (*countedStorage)(nil)
	_ Locker  = countedLocker{}
	_ Stater  = countedStater{}
)
