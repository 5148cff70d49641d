package connection

import (
	"errors"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
)

// R4f on a full switches record (R4e): a rollout's weights make room as
// an operator's weight does, from the oldest weights of instances gone
// from a synced catalog; when none is gone, nothing is written and the
// error is fleet.ErrFull, which the rollout shows and waits on (before,
// the write failed as a storage error, and the rollout went on unseen
// with its shares not in force).
func TestFleet_R4f_rollout_weights_make_room_or_say_full(t *testing.T) {
	want, names := map[string]int{"id-1": 8000, "id-2": 2000}, map[string]string{"id-1": "web-1", "id-2": "web-2"}
	t.Run("gone weights make room", func(t *testing.T) {
		storage := &fleet.Memory{}
		storeGone(t, storage, fleet.MaxWeightSwitches)
		a := fleetConnAt(t, "caddy-a", storage, nil)
		following(a)
		if changed, err := a.RolloutWeights(want, names); err != nil || !changed {
			t.Fatalf("rollout weights on a record full of gone instances: %v, %v", changed, err)
		}
		sw, _ := record(t, storage)
		_, oldest := sw.Weights["old-00000"]
		_, second := sw.Weights["old-00001"]
		if len(sw.Weights) != fleet.MaxWeightSwitches || oldest || second || sw.Weights["id-1"].Weight != 8000 || sw.Weights["id-2"].From != "rollout" {
			t.Errorf("record: %d weights, the two oldest gone kept %v %v, id-1 %+v, id-2 %+v",
				len(sw.Weights), oldest, second, sw.Weights["id-1"], sw.Weights["id-2"])
		}
		if weightOf(a, "id-1") != 8000 || weightOf(a, "id-2") != 2000 {
			t.Errorf("applied %d/%d, want 8000/2000", weightOf(a, "id-1"), weightOf(a, "id-2"))
		}
	})
	t.Run("none gone: full", func(t *testing.T) {
		storage := &fleet.Memory{}
		storeGone(t, storage, fleet.MaxWeightSwitches)
		a := fleetConnAt(t, "caddy-a", storage, nil) // not synced: it knows of no instance gone
		changed, err := a.RolloutWeights(want, names)
		if changed || !errors.Is(err, fleet.ErrFull) || errors.Is(err, ErrFleetStorage) {
			t.Fatalf("rollout weights on a full record: %v, %v; want fleet.ErrFull, no storage error", changed, err)
		}
		sw, _ := record(t, storage)
		if _, ok := sw.Weights["id-1"]; ok || len(sw.Weights) != fleet.MaxWeightSwitches {
			t.Errorf("record: %d weights, id-1 written %v", len(sw.Weights), ok)
		}
	})
}
