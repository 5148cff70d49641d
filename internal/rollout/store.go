package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// The record of a daemon's rollouts in the fleet's storage (R4f, R15): one
// entry per route, written by its decider under the storage's lock
// (internal/fleet/rollouts.go does the I/O).

// Bounds of the record.
const (
	// MaxRecordBytes bounds a record read back.
	MaxRecordBytes = 1 << 20
	// MaxRoutes bounds the entries of a record.
	MaxRoutes = 1000
	// MaxName bounds a route's name and a version kept in an entry.
	MaxName = 256
	// ClaimTTL is how long an owner's claim holds without renewal.
	ClaimTTL = 10 * time.Second
	// Ahead is how far ahead of a reader's clock an entry may be dated.
	Ahead = time.Minute
	// StaleAfter is how old a claim may be before any Caddy removes its
	// entry.
	StaleAfter = 24 * time.Hour
	// LoneFor is how long a route keeps its entry once it has had one
	// version (or none).
	LoneFor = 10 * time.Minute
)

// Record is a daemon's rollouts by route.
type Record struct {
	Rollouts map[string]State `json:"rollouts,omitempty"`
	// size is the record's bytes as read, plus the entries Put added: a
	// new entry that would take it past MaxRecordBytes (less roomFor
	// the entries' growth) is refused, as on a full record (a reader
	// refuses a record over the bound, and its next writer replaces it:
	// every other rollout would be forgotten).
	size int
}

// roomFor is what Put keeps of MaxRecordBytes for the entries' growth.
const roomFor = MaxRecordBytes / 16

// Refused is an entry a reader refused, and why.
type Refused struct {
	Route, Owner, Why string
}

// Decode reads a record at now, dropping the entries a reader must refuse:
// stale (a claim over StaleAfter old), from the future (dated over Ahead
// past now), huge (names over MaxName) or corrupt (an unknown verdict, a
// step out of its steps, steps that do not grow to 100). A record over
// MaxRecordBytes or that does not decode is an error.
func Decode(b []byte, now time.Time) (Record, []Refused, error) {
	if len(b) > MaxRecordBytes {
		return Record{}, nil, fmt.Errorf("the rollouts record is %d bytes, over %d", len(b), MaxRecordBytes)
	}
	var rec Record
	if len(b) == 0 {
		return rec, nil, nil
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, nil, fmt.Errorf("the rollouts record: %w", err)
	}
	rec.size = len(b)
	var refused []Refused
	for route, st := range rec.Rollouts {
		if why := bad(route, st, now); why != "" {
			refused = append(refused, Refused{Route: clip(route), Owner: clip(st.Owner), Why: why})
			delete(rec.Rollouts, route)
		}
	}
	slices.SortFunc(refused, func(a, b Refused) int { return cmpString(a.Route, b.Route) })
	return rec, refused, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bad says why a reader refuses an entry, "" when it does not.
func bad(route string, st State, now time.Time) string {
	switch {
	case len(route) > MaxName || len(st.Old) > MaxName || len(st.New) > MaxName || len(st.Owner) > MaxName || len(st.Retired) > MaxName || len(st.Why) > 4*MaxName:
		return "huge"
	case !st.Verdict.Known(), len(st.Steps) == 0, len(st.Steps) > MaxSteps, st.Step < 0, st.Step >= len(st.Steps), !growing(st.Steps):
		return "corrupt"
	case st.Claimed.After(now.Add(Ahead)), st.StepStart.After(now.Add(Ahead)), st.Started.After(now.Add(Ahead)):
		return "future"
	case now.Sub(st.Claimed) > StaleAfter:
		return "stale"
	}
	return ""
}

func growing(steps []int) bool {
	for i, s := range steps {
		if s < 1 || s > 100 || i > 0 && s <= steps[i-1] {
			return false
		}
	}
	return steps[len(steps)-1] == 100
}

// Encode is the record's bytes; an error when they are over
// MaxRecordBytes, which no reader would take.
func (r Record) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err == nil && len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("the rollouts record would be %d bytes, over %d", len(b), MaxRecordBytes)
	}
	return b, err
}

// Put sets route's entry, making room when the record is full by dropping
// the entry ended longest ago; an error when none has ended.
func (r *Record) Put(route string, st State) error {
	if len(route) > MaxName {
		return fmt.Errorf("route name over %d bytes", MaxName)
	}
	if r.Rollouts == nil {
		r.Rollouts = map[string]State{}
	}
	if _, ok := r.Rollouts[route]; !ok && len(r.Rollouts) >= MaxRoutes {
		oldest, at := "", time.Time{}
		for k, v := range r.Rollouts {
			if v.Final() && (oldest == "" || v.Ended.Before(at)) {
				oldest, at = k, v.Ended
			}
		}
		if oldest == "" {
			return fmt.Errorf("%d rollouts under way on the daemon, none ended", MaxRoutes)
		}
		delete(r.Rollouts, oldest)
	}
	if _, ok := r.Rollouts[route]; !ok {
		k, _ := json.Marshal(route)
		v, _ := json.Marshal(st)
		if r.size+len(k)+len(v)+2 > MaxRecordBytes-roomFor {
			return fmt.Errorf("the rollouts record holds %d bytes, no room for another entry of %d", r.size, len(k)+len(v))
		}
		r.size += len(k) + len(v) + 2
	}
	r.Rollouts[route] = st
	return nil
}

// Owns reports whether self decides st at now: it is its owner, or the
// owner's claim lapsed (ClaimTTL), or it has none.
func Owns(st State, self string, now time.Time) bool {
	return st.Owner == self || st.Owner == "" || now.Sub(st.Claimed) > ClaimTTL
}

// Ends reports whether the entry's route is done with it at now: it has
// had one version (or none) for LoneFor.
func Ends(st State, now time.Time) bool {
	return !st.Lone.IsZero() && now.Sub(st.Lone) >= LoneFor
}
