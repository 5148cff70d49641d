package rollout

import (
	"math"
	"sync/atomic"
	"time"
)

// Buckets of the latency histogram: bucket i holds latencies up to
// bucketBound(i) = 1 ms · 1.1^i; the last one everything above 60 s.
const Buckets = 118

// growth is the ratio of two bucket bounds.
const growth = 1.1

var logGrowth = math.Log(growth)

// bucketBound is the upper bound of bucket i.
func bucketBound(i int) time.Duration {
	return time.Duration(float64(time.Millisecond) * math.Pow(growth, float64(i)))
}

// bucketOf is the bucket of latency d.
func bucketOf(d time.Duration) int {
	if d <= time.Millisecond {
		return 0
	}
	i := int(math.Ceil(math.Log(float64(d)/float64(time.Millisecond)) / logGrowth))
	return min(max(i, 0), Buckets-1)
}

// Counters are one instance's requests on one route, as the request path
// counts them: atomics only.
type Counters struct {
	requests, errors atomic.Uint64
	buckets          [Buckets]atomic.Uint64
}

// Record counts one attempt: status is the instance's answer (0: none, a
// refused or reset connection or a timeout), latency its time to the
// answer's headers.
func (c *Counters) Record(status int, latency time.Duration) {
	c.requests.Add(1)
	if status == 0 || status >= 500 {
		c.errors.Add(1)
	}
	if status != 0 {
		c.buckets[bucketOf(latency)].Add(1)
	}
}

// AddTo adds what c counted so far to s.
func (c *Counters) AddTo(s *Sample) {
	s.Requests += c.requests.Load()
	s.Errors += c.errors.Load()
	for i := range c.buckets {
		s.Buckets[i] += c.buckets[i].Load()
	}
}

// Sample is counts of one version: since its instances were first seen
// (totals), or over a window (a difference of totals).
type Sample struct {
	Requests, Errors uint64
	Buckets          [Buckets]uint64
}

// Sub is s minus base, per count (0 where base is larger: an instance
// whose counters went away).
func (s Sample) Sub(base Sample) Sample {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	out := Sample{Requests: d(s.Requests, base.Requests), Errors: d(s.Errors, base.Errors)}
	for i := range s.Buckets {
		out.Buckets[i] = d(s.Buckets[i], base.Buckets[i])
	}
	return out
}

// Figures are what a verdict compares: a window's requests, error rate in
// percent and p99 latency.
type Figures struct {
	Requests  uint64        `json:"requests"`
	ErrorRate float64       `json:"error_rate"`
	P99       time.Duration `json:"p99"`
	P90       time.Duration `json:"p90"`
}

// Figures of s.
func (s Sample) Figures() Figures {
	f := Figures{Requests: s.Requests}
	if s.Requests > 0 {
		f.ErrorRate = 100 * float64(s.Errors) / float64(s.Requests)
	}
	var n uint64
	for _, b := range s.Buckets {
		n += b
	}
	if n == 0 {
		return f
	}
	f.P90, f.P99 = s.quantile(n, 0.90), s.quantile(n, 0.99)
	return f
}

// quantile is the upper bound of the bucket holding the q quantile of
// the n latencies counted.
func (s Sample) quantile(n uint64, q float64) time.Duration {
	rank := uint64(math.Ceil(q * float64(n)))
	var cum uint64
	for i, b := range s.Buckets {
		if cum += b; cum >= rank {
			return bucketBound(i)
		}
	}
	return bucketBound(Buckets - 1)
}
