package rollout

import (
	"fmt"
	"math"
	"time"
)

// Verdict is where a rollout stands.
type Verdict string

// Verdicts.
const (
	// Rolling: the new version has its step's share.
	Rolling Verdict = "rolling"
	// Held: a step had too few requests past its wait, and `then stop`:
	// the share stays until promote or abort.
	Held Verdict = "held"
	// RolledBack: a step failed, or an operator aborted: share 0 for good.
	RolledBack Verdict = "rolled_back"
	// Done: the last step passed (or an operator promoted): share 100,
	// the old version drained.
	Done Verdict = "done"
	// Abandoned: the new version left, or a newer one superseded it.
	Abandoned Verdict = "abandoned"
)

// Known reports whether v is a verdict of this package.
func (v Verdict) Known() bool {
	switch v {
	case Rolling, Held, RolledBack, Done, Abandoned:
		return true
	}
	return false
}

// State is one route's rollout, as the fleet's record keeps it.
type State struct {
	Old   string `json:"old"`
	New   string `json:"new"`
	Steps []int  `json:"steps"`
	// Step indexes Steps; StepStart is when it began, Started when the
	// rollout did.
	Step      int       `json:"step"`
	StepStart time.Time `json:"step_start"`
	Started   time.Time `json:"started"`
	Verdict   Verdict   `json:"verdict"`
	Why       string    `json:"why,omitempty"`
	// NewFigures and OldFigures are the last window judged.
	NewFigures Figures `json:"new_figures"`
	OldFigures Figures `json:"old_figures"`
	// Reference is the old version's figures of the last window in
	// which it had enough requests: what the 100% step compares with.
	Reference *Figures `json:"reference,omitempty"`
	// Ended is when the verdict became final (RolledBack, Done,
	// Abandoned); Lone since when the route has had at most one version.
	Ended time.Time `json:"ended,omitzero"`
	Lone  time.Time `json:"lone,omitzero"`
	// Owner is the Caddy that decides (its fleet ID), Claimed when it
	// last said so.
	Owner   string    `json:"owner"`
	Claimed time.Time `json:"claimed"`
	// Retired is the version of the rollout this one superseded that
	// is not its stable one (a newer version came while it rolled, or
	// after it ended): it keeps weight 0, the last weight a rollout of
	// the route writes outside its own old and new.
	Retired string `json:"retired,omitempty"`
}

// Begin is a rollout of newer against old from now.
func Begin(old, newer string, cfg Config, now time.Time) State {
	return State{Old: old, New: newer, Steps: append([]int(nil), cfg.Steps...),
		StepStart: now, Started: now, Verdict: Rolling}
}

// Share is the new version's share of new requests, in percent.
func (st State) Share() int {
	switch st.Verdict {
	case Rolling, Held:
		if st.Step >= 0 && st.Step < len(st.Steps) {
			return st.Steps[st.Step]
		}
		return 0
	case Done:
		return 100
	}
	return 0
}

// Stable is the version that has (or gets back) the route: the new one
// once done, else the old one.
func (st State) Stable() string {
	if st.Verdict == Done {
		return st.New
	}
	return st.Old
}

// Final reports whether the verdict no longer changes by itself.
func (st State) Final() bool {
	return st.Verdict == RolledBack || st.Verdict == Done || st.Verdict == Abandoned
}

// Window is what one Caddy measures of a step: its counters' totals per
// version when the step's window began. It lives in memory: a Caddy that
// restarts, or that takes over a rollout, starts its window again.
type Window struct {
	new     string
	step    int
	start   time.Time
	began   time.Time
	baseNew Sample
	baseOld Sample
	based   bool
}

// Change is what an Advance did.
type Change int

// Changes.
const (
	Nothing  Change = iota
	Passed          // a step passed (judged, or `then proceed` unjudged)
	Failed          // a step failed: rolled back
	Finished        // the last step passed: done
	Halted          // too few requests: held
	Left            // the new version left: abandoned; or the old one left: done
)

// Advance moves st at now: newer and old are the totals of the new and
// the old version's counters, counts their instances on the route. It
// returns the state and what changed; the state is unchanged unless
// change is not Nothing.
func Advance(st State, w *Window, cfg Config, now time.Time, newCount, oldCount int, newer, old Sample) (State, Change) {
	if st.Final() || st.Verdict == Held {
		return st, Nothing
	}
	if newCount == 0 {
		st.Verdict, st.Why, st.Ended = Abandoned, "the new version left the route", now
		return st, Left
	}
	if oldCount == 0 {
		st.Verdict, st.Why, st.Ended = Done, "the old version left the route", now
		return st, Left
	}
	if w.new != st.New || w.step != st.Step || !w.start.Equal(st.StepStart) {
		*w = Window{new: st.New, step: st.Step, start: st.StepStart}
	}
	judgeFrom := st.StepStart.Add(cfg.Settle)
	if now.Before(judgeFrom) {
		return st, Nothing // a probe during the switch never decides
	}
	if !w.based {
		w.baseNew, w.baseOld, w.based, w.began = newer, old, true, now
		return st, Nothing
	}
	wn, wo := newer.Sub(w.baseNew).Figures(), old.Sub(w.baseOld).Figures()
	end := st.StepStart.Add(cfg.Every)
	if wn.Requests < uint64(cfg.Min) {
		if now.Before(end.Add(cfg.Wait)) {
			return st, Nothing
		}
		st.NewFigures, st.OldFigures = wn, wo
		if cfg.Proceed {
			return pass(st, now, fmt.Sprintf("step %d%% passed unjudged: %d requests of the new version, under min %d after wait %s",
				st.Share(), wn.Requests, cfg.Min, cfg.Wait))
		}
		st.Verdict = Held
		st.Why = fmt.Sprintf("held at %d%%: %d requests of the new version, under min %d after wait %s",
			st.Share(), wn.Requests, cfg.Min, cfg.Wait)
		return st, Halted
	}
	ref := wo
	if wo.Requests >= uint64(cfg.Min) {
		r := wo
		st.Reference = &r
	} else if st.Reference != nil {
		ref = *st.Reference
	}
	st.NewFigures, st.OldFigures = wn, wo
	atEnd := !now.Before(end)
	if why := judge(cfg, wn, ref, atEnd); why != "" {
		st.Verdict, st.Why, st.Ended = RolledBack, fmt.Sprintf("step %d%% failed: %s", st.Share(), why), now
		return st, Failed
	}
	if !atEnd {
		return st, Nothing
	}
	return pass(st, now, fmt.Sprintf("step %d%% passed: errors %.2f%% vs %.2f%%, p99 %s vs %s over %d requests",
		st.Share(), wn.ErrorRate, ref.ErrorRate, wn.P99, ref.P99, wn.Requests))
}

// LatencyFloor is the least difference of p99 latencies, and of p90
// ones, that fails a step: below it, a p99 over few requests is the
// jitter of the slowest one, and a p90 that of a loaded host (a 2 ms p99
// or p90 against a 1 ms one is not a slower release).
const LatencyFloor = 10 * time.Millisecond

// judge says why the new version's figures fail against the old one's,
// "" when they pass. The error rate fails at any moment; the latency only
// over a whole step (latency, at its end), when the p99 and the p90 are
// each over the factor and the floor: a slower release moves the body of
// the distribution, a GC pause or a loaded host only its few slowest
// requests, and a millisecond or two of its body (a 1 ms p90 at 2 ms is
// a busy scheduler, not a release twice as slow).
func judge(cfg Config, n, o Figures, latency bool) string {
	if margin := chance(n, o); n.ErrorRate-o.ErrorRate > cfg.MaxErrors+margin {
		return fmt.Sprintf("error rate %.2f%% over the old version's %.2f%% by more than %g points (%s) and %.2f of chance, %d requests",
			n.ErrorRate, o.ErrorRate, cfg.MaxErrors, LabelMaxErrors, margin, n.Requests)
	}
	if latency && o.P99 > 0 && float64(n.P99) > cfg.MaxLatency*float64(o.P99) && n.P99-o.P99 > LatencyFloor &&
		float64(n.P90) > cfg.MaxLatency*float64(o.P90) && n.P90-o.P90 > LatencyFloor {
		return fmt.Sprintf("p99 latency %s over %gx the old version's %s (p90 %s against %s) (%s), %d requests",
			n.P99.Round(time.Millisecond), cfg.MaxLatency, o.P99.Round(time.Millisecond),
			n.P90.Round(time.Millisecond), o.P90.Round(time.Millisecond), LabelMaxLatency, n.Requests)
	}
	return ""
}

// Chance is how many standard errors of the difference of two error
// rates a difference must pass, besides max_errors, to fail a step: the
// new version's few requests swing its rate by chance, most where both
// versions fail alike (a flaky dependency, an outsider's requests both
// answer 500), and a step is judged at every look.
const Chance = 3

// chance is Chance standard errors of the difference of n's and o's
// error rates (pooled), in points.
func chance(n, o Figures) float64 {
	if n.Requests == 0 || o.Requests == 0 {
		return 0
	}
	nn, no := float64(n.Requests), float64(o.Requests)
	p := (n.ErrorRate*nn + o.ErrorRate*no) / 100 / (nn + no)
	return 100 * Chance * math.Sqrt(max(p*(1-p), 0)*(1/nn+1/no))
}

func pass(st State, now time.Time, why string) (State, Change) {
	st.Why = why
	if st.Step+1 >= len(st.Steps) {
		st.Verdict, st.Ended = Done, now
		st.Why = why + "; the old version is drained"
		return st, Finished
	}
	st.Step++
	st.StepStart = now
	return st, Passed
}

// Promote ends st as done: the new version gets every request.
func Promote(st State, now time.Time, who string) State {
	st.Verdict, st.Ended, st.Step = Done, now, len(st.Steps)-1
	st.Why = "promoted by " + who
	return st
}

// Abort ends st as rolled back.
func Abort(st State, now time.Time, who string) State {
	st.Verdict, st.Ended = RolledBack, now
	st.Why = "aborted by " + who
	return st
}

// Next says which rollout present calls for after st (nil: none yet):
// present are the route's versions in the order they appeared, oldest
// first. It returns the old and new version of a rollout to begin, ok
// false when none: a route of one version has nothing to roll out, and a
// version already rolled out or back does not start again.
func Next(st *State, present []string) (old, newer string, ok bool) {
	if len(present) < 2 {
		return "", "", false
	}
	if st == nil {
		return present[0], present[len(present)-1], present[0] != ""
	}
	latest := present[len(present)-1]
	if latest == st.New || latest == st.Old || latest == "" {
		return "", "", false
	}
	stable := st.Stable()
	for _, v := range present {
		if v == stable {
			return stable, latest, true
		}
	}
	return "", "", false
}

// Weights are the runtime weights of one instance of the new and of the
// old version at share percent, with n new and m old instances (R4c: at
// most 10,000, at least 1 while the share is not 0).
func Weights(share, n, m int) (newW, oldW int) {
	share = min(max(share, 0), 100)
	if n > 0 && share > 0 {
		newW = max(1, 100*share/n)
	}
	if m > 0 && share < 100 {
		oldW = max(1, 100*(100-share)/m)
	}
	return newW, oldW
}
