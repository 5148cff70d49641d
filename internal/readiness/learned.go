package readiness

import (
	"sync"
	"time"
)

// What the prober learns per image (R1a): how long after its probe
// starts an instance of the image accepts a connection, and how much that
// varies, so that the next start of one is probed densely in the window
// where it usually completes (the learnt time, less two deviations, to
// three deviations past it), in at most denseSteps attempts there and
// never more sparsely than unlearnt: a port that opens in the window is
// found within a twelfth of its width. Before and after the window the
// unlearnt pace holds, so a start faster or slower than learnt is found
// as soon as before.
const (
	// maxLearnedImages bounds the images remembered (a few dozen bytes
	// each), the oldest forgotten first.
	maxLearnedImages = 1024
	// denseFloor is the shortest pause in the dense window, minDeviation
	// the narrowest deviation the window is drawn with.
	denseFloor   = 100 * time.Microsecond
	minDeviation = 250 * time.Microsecond
	// denseSteps is how many pauses the window is cut into.
	denseSteps = 12
	// learnWeight is the weight, in tenths, of the latest start in the
	// learnt time and deviation (exponentially weighted averages).
	learnWeight = 3
)

// learnt is an image's usual time to listen and its deviation.
type learnt struct{ took, dev time.Duration }

// startTimes is the learnt time to listen per image.
type startTimes struct {
	mu    sync.Mutex
	took  map[string]learnt
	order []string
}

// learn records that an instance of image accepted took after its probe
// started.
func (s *startTimes) learn(image string, took time.Duration) {
	if image == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.took[image]; ok {
		dev := took - old.took
		if dev < 0 {
			dev = -dev
		}
		s.took[image] = learnt{took: old.took + (took-old.took)*learnWeight/10, dev: old.dev + (dev-old.dev)*learnWeight/10}
		return
	}
	if s.took == nil {
		s.took = make(map[string]learnt)
	}
	if len(s.order) >= maxLearnedImages {
		delete(s.took, s.order[0])
		s.order = append(s.order[:0], s.order[1:]...)
	}
	s.took[image] = learnt{took: took, dev: took / 4}
	s.order = append(s.order, image)
}

// learnt is what image usually takes, and whether it is known.
func (s *startTimes) learnt(image string) (learnt, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.took[image]
	return l, ok
}

// densePause is the pause after an attempt elapsed into the probe of an
// instance whose image usually accepts as l says, given the unlearnt
// pause: in the window, its width over denseSteps (at least denseFloor,
// at most unlearnt); before it, unlearnt cut short at the window's start.
// ok is false past the window: the unlearnt pace resumes.
func densePause(l learnt, elapsed, unlearnt time.Duration) (pause time.Duration, ok bool) {
	dev := max(l.dev, minDeviation)
	from, to := l.took-2*dev, l.took+3*dev
	switch {
	case elapsed < from:
		return min(unlearnt, from-elapsed), true
	case elapsed < to:
		return min(max((to-from)/denseSteps, denseFloor), unlearnt), true
	}
	return 0, false
}
