package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// R4e: an unchanged record is not decoded; with a storage that can Stat,
// it is not loaded either once StatGranularity has passed since its
// KeyInfo was first seen.
func TestSwitches_R4e_an_unchanged_record_is_neither_decoded_nor_loaded(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		storage   Storage
		wantLoads int
	}{
		{"no Stat: loaded, not decoded", &Memory{}, 11},
		{"Stat: neither", &StatMemory{}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Self{ID: "a"})
			f.SetStorage(tc.storage)
			if _, err := f.UpdateSwitches(ctx, "d", func(sw *Switches) error {
				sw.Weights = map[string]WeightSwitch{"id-1": {Weight: 3}}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			r := NewSwitchesReader("d")
			for i := range 11 {
				sw, _, changed, err := r.Read(ctx, f, t0.Add(time.Duration(i)*time.Second))
				if err != nil || changed != (i == 0) || (i == 0 && sw.Weights["id-1"].Weight != 3) {
					t.Fatalf("read %d: changed %v, %v, %v", i, changed, sw, err)
				}
			}
			if loads, decodes := r.Counts(); loads != tc.wantLoads || decodes != 1 {
				t.Errorf("11 reads of one record: %d loads, %d decodes; want %d and 1", loads, decodes, tc.wantLoads)
			}
		})
	}
}

// R4e: a record written again within the storage's granularity of
// modification times, at the same size, is still seen, within
// StatGranularity and a read.
func TestSwitches_R4e_a_change_within_the_mtime_granularity_is_seen(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	storage := &StatMemory{Granularity: time.Hour, Now: func() time.Time { return now }}
	f := New(Self{ID: "a"})
	f.SetStorage(storage)
	set := func(w int) {
		t.Helper()
		if _, err := f.UpdateSwitches(ctx, "d", func(sw *Switches) error {
			sw.Weights = map[string]WeightSwitch{"id-1": {Weight: w}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	set(3)
	r := NewSwitchesReader("d")
	if sw, _, _, err := r.Read(ctx, f, now); err != nil || sw.Weights["id-1"].Weight != 3 {
		t.Fatalf("first read: %v %v", sw, err)
	}
	set(5) // same modification time, same size
	seen := false
	for i := 1; i <= int(StatGranularity/time.Second)+1 && !seen; i++ {
		sw, _, changed, err := r.Read(ctx, f, now.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		seen = changed && sw.Weights["id-1"].Weight == 5
	}
	if !seen {
		t.Fatalf("a change within the mtime's granularity not seen within %v", StatGranularity+time.Second)
	}
}

// R4e: when the record is full, the oldest weights of gone instances make
// room (a time ahead counting as now); with none gone, ErrFull.
func TestSwitches_R4e_make_room_takes_the_oldest_gone_weights(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	sw := Switches{Weights: map[string]WeightSwitch{}}
	for i := range MaxWeightSwitches {
		sw.Weights[fmt.Sprintf("gone-%05d", i)] = WeightSwitch{At: now.Add(-time.Duration(MaxWeightSwitches-i) * time.Minute)}
	}
	sw.Weights["gone-ahead"] = WeightSwitch{At: now.Add(-time.Duration(MaxWeightSwitches+5) * time.Minute).Add(24 * 365 * time.Hour)}
	sw.Weights["live"] = WeightSwitch{At: now.Add(-100 * 24 * time.Hour)}
	isGone := func(id string) bool { return id != "live" }
	dropped, err := sw.MakeRoom(now, isGone)
	if err != nil || len(dropped) != 2 || dropped[0] != "gone-00000" || dropped[1] != "gone-00001" {
		t.Fatalf("dropped %v, %v; want the two oldest gone", dropped, err)
	}
	if _, ok := sw.Weights["live"]; !ok || len(sw.Weights) != MaxWeightSwitches {
		t.Fatalf("%d weights kept, live kept %v", len(sw.Weights), ok)
	}
	sw.Weights["one-more"] = WeightSwitch{At: now}
	if _, err := sw.MakeRoom(now, func(string) bool { return false }); !errors.Is(err, ErrFull) {
		t.Errorf("none gone: %v, want ErrFull", err)
	}
}
