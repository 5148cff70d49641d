package fleet

import "context"

// countedStorage is the storage a Fleet is given, every call of which is
// heard by call (Hooks.Call), so that a Caddy's /metrics says how many
// calls the fleet makes of its storage, by op.
type countedStorage struct {
	s    Storage
	call func(op string)
}

// countedLocker is a countedStorage of a storage that can lock, so that
// UpdateSwitches still finds the lock.
type countedLocker struct {
	countedStorage
	l Locker
}

func counted(s Storage, call func(op string)) Storage {
	c := countedStorage{s, call}
	if l, ok := s.(Locker); ok {
		return &countedLocker{c, l}
	}
	return &c
}

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

func (c *countedLocker) Lock(ctx context.Context, name string) error {
	c.call("lock")
	return c.l.Lock(ctx, name)
}

func (c *countedLocker) Unlock(ctx context.Context, name string) error {
	c.call("unlock")
	return c.l.Unlock(ctx, name)
}

// Interface guards
var (
	_ Storage = (*countedStorage)(nil)
	_ Locker  = (*countedLocker)(nil)
)
