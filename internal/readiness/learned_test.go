package readiness

import (
	"fmt"
	"testing"
	"time"
)

// schedule replays the attempts of one probe of an instance that starts
// to listen at listen: how many attempts it takes and how late the one
// that is accepted comes, with the pause function given.
func schedule(listen time.Duration, pause func(elapsed time.Duration) time.Duration) (attempts int, late time.Duration) {
	for at := time.Duration(0); ; at += pause(at) {
		attempts++
		if at >= listen {
			return attempts, at - listen
		}
	}
}

// R1a: once an image's start is learnt, a start in its window is found
// within a twelfth of the window's width (never later than the unlearnt
// pace allows), in at most denseSteps attempts more than unlearnt; a
// start anywhere else is found no later than the unlearnt pace allows.
// Over the window, on average, sooner than unlearnt.
func TestDensePause_R1a_finds_a_learnt_start_sooner(t *testing.T) {
	p := New(t.Context(), 0, 0, func(string, uint64, bool) {}, nil)
	for _, l := range []learnt{{2 * time.Millisecond, 300 * time.Microsecond}, {6 * time.Millisecond, time.Millisecond},
		{50 * time.Millisecond, 5 * time.Millisecond}, {400 * time.Millisecond, 20 * time.Millisecond}, {3 * time.Second, 500 * time.Millisecond}} {
		t.Run(fmt.Sprint(l.took), func(t *testing.T) {
			dense := func(elapsed time.Duration) time.Duration {
				unlearnt := p.pause(elapsed)
				if d, ok := densePause(l, elapsed, unlearnt); ok {
					return d
				}
				return unlearnt
			}
			dev := max(l.dev, minDeviation)
			from, to := l.took-2*dev, l.took+3*dev
			var uSum, dSum time.Duration
			var uAttempts, dAttempts, in int
			for i := range 300 {
				listen := l.took * 3 * time.Duration(i) / 300
				ua, ul := schedule(listen, p.pause)
				da, dl := schedule(listen, dense)
				if dl > p.pause(listen) {
					t.Fatalf("listening at %v: %v late, more than the unlearnt pause there (%v)", listen, dl, p.pause(listen))
				}
				if listen < from || listen >= to {
					continue
				}
				if step := max((to-from)/denseSteps, denseFloor); dl > step {
					t.Errorf("listening at %v, in the window: %v late, want at most %v", listen, dl, step)
				}
				if da > ua+denseSteps {
					t.Errorf("listening at %v: %d attempts, unlearnt %d", listen, da, ua)
				}
				uSum, dSum, uAttempts, dAttempts, in = uSum+ul, dSum+dl, uAttempts+ua, dAttempts+da, in+1
			}
			if dSum > uSum {
				t.Errorf("in the window, %v late on average, unlearnt %v", dSum/time.Duration(in), uSum/time.Duration(in))
			}
			t.Logf("listening in the learnt window: unlearnt %v late and %.1f attempts on average; learnt %v and %.1f",
				uSum/time.Duration(in), float64(uAttempts)/float64(in), dSum/time.Duration(in), float64(dAttempts)/float64(in))
		})
	}
}

// R1a: the learnt time follows the latest starts (an average weighted to
// them), and at most maxLearnedImages images are remembered.
func TestStartTimes_R1a_learn_and_bound(t *testing.T) {
	var s startTimes
	s.learn("img", 10*time.Millisecond)
	for range 20 {
		s.learn("img", 20*time.Millisecond)
	}
	if l, ok := s.learnt("img"); !ok || l.took < 19*time.Millisecond || l.took > 20*time.Millisecond || l.dev > time.Millisecond {
		t.Errorf("learnt %+v %v, want about 20ms, deviating little", l, ok)
	}
	for i := range maxLearnedImages + 10 {
		s.learn(fmt.Sprint("i", i), time.Millisecond)
	}
	if len(s.took) != maxLearnedImages || len(s.order) != maxLearnedImages {
		t.Errorf("%d images kept", len(s.took))
	}
	if _, ok := s.learnt("img"); ok {
		t.Error("the oldest image was not forgotten")
	}
	s.learn("", time.Second)
	if _, ok := s.learnt(""); ok {
		t.Error("learnt for no image")
	}
}
