package catalog

import (
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Weights (R4c) and session identities (R4d): what the dicer_weighted and
// dicer_sticky selection policies read from each Target. The catalog only
// parses, bounds and carries them; the policies choose.

const (
	// DefaultWeight is the weight of an instance without a valid
	// caddy.weight label or a runtime weight.
	DefaultWeight = 1
	// MaxWeight bounds a weight, from a label or set at runtime, so that a
	// rotation's sum stays far from overflow whatever tenants write.
	MaxWeight = 10000
	// MaxSessionKeyBytes bounds caddy.session_key; a longer or empty one
	// counts as absent (the instance's identity is then its own).
	MaxSessionKeyBytes = 128
)

// ParseWeight parses a weight, from a caddy.weight label or the admin API:
// an integer from 0 to MaxWeight, surrounding spaces allowed.
func ParseWeight(raw string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n < 0 || n > MaxWeight {
		return 0, false
	}
	return n, true
}

// weighting is what an entry holds for R4c and R4d, worked out in
// newEntry (runtime carried over by keepRuntimeWeight).
type weighting struct {
	// identity is what sticky sessions key on: caddy.session_key, else
	// the daemon's Identity, else the name; badKey names a session key
	// label ignored for its size.
	identity string
	// weight is the caddy.weight label's, DefaultWeight when it is absent
	// or bad (badWeight); at most MaxWeight.
	weight int32
	// runtime is a weight set through the admin API, -1 when none; it
	// outranks the label and lasts while the instance (its ID) does.
	runtime   int32
	badWeight bool
	badKey    bool
}

// newWeighting parses inst's caddy.weight and caddy.session_key.
func newWeighting(inst *Instance) weighting {
	w := weighting{weight: DefaultWeight, runtime: -1, identity: inst.Name}
	if inst.Identity != "" {
		w.identity = inst.Identity
	}
	if raw, ok := inst.Labels[LabelWeight]; ok {
		if n, valid := ParseWeight(raw); valid {
			w.weight = int32(n)
		} else {
			w.badWeight = true
		}
	}
	if key, ok := inst.Labels[LabelSessionKey]; ok {
		if key = strings.TrimSpace(key); key != "" && len(key) <= MaxSessionKeyBytes {
			w.identity = "key:" + key // apart from every name
		} else {
			w.badKey = true
		}
	}
	return w
}

// effectiveWeight is the runtime weight if one is set, else the label's.
func (w *weighting) effectiveWeight() int {
	if w.runtime >= 0 {
		return int(w.runtime)
	}
	return int(w.weight)
}

// keepRuntimeWeight carries the runtime weight of old, the entry e
// replaces (nil: none), over to e: it lasts until the instance goes or it
// is cleared, whatever the daemon says of the instance meanwhile.
func (e *entry) keepRuntimeWeight(old *entry) {
	if old != nil {
		e.runtime = old.runtime
	}
}

// warnWeighting warns, once per bad value, of a caddy.weight or
// caddy.session_key label that is ignored.
func (c *Catalog) warnWeighting(old, e *entry) {
	name := zap.String("instance", e.inst.Name)
	if e.badWeight && (old == nil || old.inst.Labels[LabelWeight] != e.inst.Labels[LabelWeight]) {
		c.logger.Warn("label caddy.weight is not an integer from 0 to "+strconv.Itoa(MaxWeight)+
			": the instance has the default weight, 1 (R4c)",
			name, zap.String(LabelWeight, ClipLabel(e.inst.Labels[LabelWeight])))
	}
	if e.badKey && (old == nil || old.inst.Labels[LabelSessionKey] != e.inst.Labels[LabelSessionKey]) {
		c.logger.Warn("label caddy.session_key is empty or over "+strconv.Itoa(MaxSessionKeyBytes)+
			" bytes: sessions are keyed by the instance's name (R4d)",
			name, zap.Int("bytes", len(e.inst.Labels[LabelSessionKey])))
	}
}

// WeightChange is one instance whose runtime weight SetWeight changed.
type WeightChange struct {
	ID   string
	Name string
	// Weight is the weight the instance has now, runtime or label.
	Weight int
	// Runtime is set while a runtime weight is in force.
	Runtime bool
}

// SetWeight gives every instance that match selects (by its labels and
// name) the runtime weight weight, or clears it when weight is negative
// (R4c). The next snapshot has it, so the next request sees it; no
// instance that is not in the catalog gets one, so what callers set is
// bounded by the instances. It returns the instances it applies to, in
// name order.
func (c *Catalog) SetWeight(match func(labels map[string]string, name string) bool, weight int) []WeightChange {
	if weight > MaxWeight {
		weight = MaxWeight
	}
	if weight < 0 {
		weight = -1
	}
	c.mu.Lock()
	var ids []string
	for id, e := range c.byID {
		if !e.inst.Group && match(e.inst.Labels, e.inst.Name) {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	var out []WeightChange
	for _, id := range ids {
		c.amend(id, false, func(e *entry) bool {
			if int(e.runtime) != weight {
				c.logger.Info("instance weight set at runtime (R4c)", zap.String("instance", e.inst.Name),
					zap.Int("weight", weight), zap.Int("label_weight", int(e.weight)))
			}
			e.runtime = int32(weight)
			out = append(out, WeightChange{ID: e.inst.ID, Name: e.inst.Name, Weight: e.effectiveWeight(), Runtime: e.runtime >= 0})
			return true
		})
	}
	sortChanges(out)
	return out
}

func sortChanges(list []WeightChange) {
	slices.SortFunc(list, func(a, b WeightChange) int {
		return cmpOr(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
}

// SetRuntimeWeights makes want the runtime weights of the instances it
// names by ID (a fleet's switches, R4e), and clears those of every other
// instance: the next snapshot has them. IDs the catalog does not hold are
// skipped. It returns the instances it changed.
func (c *Catalog) SetRuntimeWeights(want map[string]int) []WeightChange {
	c.mu.Lock()
	var ids []string
	for id, e := range c.byID {
		w, ok := want[id]
		if !ok {
			w = -1
		}
		if !e.inst.Group && int(e.runtime) != min(w, MaxWeight) {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	var out []WeightChange
	for _, id := range ids {
		w, ok := want[id]
		if !ok || w < 0 {
			w = -1
		}
		w = min(w, MaxWeight)
		c.amend(id, false, func(e *entry) bool {
			if int(e.runtime) == w {
				return false
			}
			c.logger.Info("instance weight set at runtime by the fleet (R4c, R4e)", zap.String("instance", e.inst.Name),
				zap.Int("weight", w), zap.Int("label_weight", int(e.weight)))
			e.runtime = int32(w)
			out = append(out, WeightChange{ID: e.inst.ID, Name: e.inst.Name, Weight: e.effectiveWeight(), Runtime: e.runtime >= 0})
			return true
		})
	}
	sortChanges(out)
	return out
}
