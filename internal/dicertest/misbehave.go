package dicertest

import "github.com/caddy-dicer/caddy-dicer/internal/dicerpb"

// Knobs that make the daemon misbehave, for the client's defences.

// WithholdCaughtUp makes every later GetEvents never say caught_up (true),
// or say it again (false): its history comes without the flag, then the
// stream follows as usual, so a client waiting for it waits forever.
func (d *Daemon) WithholdCaughtUp(withhold bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noCaughtUp = withhold
}

// AnswerGetInstance makes every later GetInstance answer with what answer
// returns for the instance asked for (a clone, which it may change or
// replace: an instance other than the one asked for, say); nil restores
// the plain answer. answer runs under the daemon's lock: it must not call
// the Daemon.
func (d *Daemon) AnswerGetInstance(answer func(asked *dicerpb.Instance) *dicerpb.Instance) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.getAnswer = answer
}
