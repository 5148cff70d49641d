package follow

import (
	"math/rand/v2"
	"time"
)

// Default reconnect backoff bounds.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 15 * time.Second
)

// Backoff is capped exponential with jitter: the n-th delay is drawn from
// [d/2, d] with d = min*2^n capped at max.
type Backoff struct {
	min, max time.Duration
	n        int
}

// NewBackoff returns a Backoff between min and max; zero (or less) means
// DefaultMinBackoff and DefaultMaxBackoff, and a max below min is raised
// to min.
func NewBackoff(min, max time.Duration) *Backoff {
	if min <= 0 {
		min = DefaultMinBackoff
	}
	if max <= 0 {
		max = DefaultMaxBackoff
	}
	if max < min {
		max = min
	}
	return &Backoff{min: min, max: max}
}

// Reset starts again from min.
func (b *Backoff) Reset() { b.n = 0 }

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	d := b.max
	if b.n < 62 {
		if x := b.min << b.n; x > 0 && x < b.max {
			d = x
			b.n++
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
