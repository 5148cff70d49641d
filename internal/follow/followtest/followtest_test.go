package followtest

import (
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func TestSinkRecords(t *testing.T) {
	s := NewSink()
	s.Replace([]catalog.Instance{{ID: "a", Name: "web-a", Labels: map[string]string{"case": "x"}}, {ID: "b", Name: "web-b"}})
	s.Put(catalog.Instance{ID: "c", Name: "web-c", Labels: map[string]string{"case": "x"}})
	s.Delete("b")
	v := s.Snapshot()
	if len(v.ByID) != 2 || v.Replaces != 1 || s.Replaces() != 1 {
		t.Fatalf("snapshot %v", v)
	}
	if in, ok := v.Named("web-c"); !ok || in.ID != "c" {
		t.Fatalf("Named(web-c) = %+v, %v", in, ok)
	}
	if _, ok := v.Named("web-b"); ok {
		t.Fatal("a deleted instance is still named")
	}
	if got := v.Labelled("case", "x"); len(got) != 2 || got["web-a"].ID != "a" || got["web-c"].ID != "c" {
		t.Fatalf("Labelled = %v", got)
	}
	// A snapshot is a copy.
	s.Delete("a")
	if _, ok := v.ByID["a"]; !ok {
		t.Fatal("the snapshot changed with the sink")
	}
	if s.Overlapped() {
		t.Fatal("calls from one goroutine reported as overlapping")
	}
}

// WaitFor returns once a later call makes the condition hold, with a copy
// of the state it held on.
func TestSinkWaitFor(t *testing.T) {
	s := NewSink()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Replace(nil)
		s.Put(catalog.Instance{ID: "a", Name: "a"})
	}()
	v := s.WaitFor(t, 10*time.Second, "a", func(v View) bool { _, ok := v.ByID["a"]; return ok })
	wg.Wait()
	s.Delete("a")
	if _, ok := v.ByID["a"]; !ok || v.Replaces != 1 {
		t.Fatalf("WaitFor returned %v", v)
	}
	if !s.Check(func(v View) bool { return len(v.ByID) == 0 }) {
		t.Fatal("Check does not see the deletion")
	}
}

// Calls that overlap break the catalog.Sink contract, and are reported.
func TestSinkOverlap(t *testing.T) {
	s := NewSink()
	done := s.enter()
	s.Put(catalog.Instance{ID: "a"})
	done()
	if !s.Overlapped() {
		t.Fatal("overlapping calls not reported")
	}
}
