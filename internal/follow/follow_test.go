package follow

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func TestBackoff(t *testing.T) {
	b := NewBackoff(0, 0)
	if b.min != DefaultMinBackoff || b.max != DefaultMaxBackoff {
		t.Fatalf("defaults %v..%v, want %v..%v", b.min, b.max, DefaultMinBackoff, DefaultMaxBackoff)
	}
	if DefaultMinBackoff != 250*time.Millisecond || DefaultMaxBackoff != 15*time.Second {
		t.Fatalf("defaults %v..%v, want 250ms..15s", DefaultMinBackoff, DefaultMaxBackoff)
	}
	b = NewBackoff(100*time.Millisecond, time.Second)
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		if d := b.Next(); d < c/2 || d > c {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, d, c/2, c)
		}
	}
	b.Reset()
	if d := b.Next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after reset: %v, want within [50ms, 100ms]", d)
	}
	// Many steps never overflow past the cap.
	for range 200 {
		if d := b.Next(); d <= 0 || d > time.Second {
			t.Fatalf("delay %v out of bounds", d)
		}
	}
	// max below min is raised to min.
	if b := NewBackoff(time.Second, time.Millisecond); b.max != time.Second {
		t.Fatalf("max %v, want raised to min", b.max)
	}
}

// expectOneNotify checks that p has exactly one notification pending.
func expectOneNotify(t *testing.T, p *Pending) {
	t.Helper()
	select {
	case <-p.Notify():
	default:
		t.Fatal("no notification")
	}
	select {
	case <-p.Notify():
		t.Fatal("more than one pending notification")
	default:
	}
}

func TestPendingCoalesces(t *testing.T) {
	p := NewPending()
	for range 100 {
		p.Add("a", false)
	}
	p.Add("b", false)
	p.Add("c", false)
	p.Add("c", true) // deleted
	p.Flag()
	expectOneNotify(t, p)
	ids, flagged, _ := p.Take()
	if len(ids) != 3 || ids["a"].Deleted || ids["b"].Deleted || !ids["c"].Deleted || !flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	if ids, flagged, _ := p.Take(); len(ids) != 0 || flagged {
		t.Fatalf("second take = %v, %v, want empty", ids, flagged)
	}
}

// A deletion sticks: IDs are never reused, and an event that follows the
// deletion (a network disconnect after a destroy) does not undo it.
func TestPendingDeletedSticks(t *testing.T) {
	p := NewPending()
	for range 100 {
		p.Add("a", false)
	}
	p.Add("b", false)
	p.Add("c", true)
	p.Add("c", false) // a disconnect after the destroy: still destroyed
	expectOneNotify(t, p)
	ids, flagged, _ := p.Take()
	if len(ids) != 3 || ids["a"].Deleted || ids["b"].Deleted || !ids["c"].Deleted || flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	if ids, _, _ := p.Take(); len(ids) != 0 {
		t.Fatalf("second take = %v, want empty", ids)
	}
	// Once taken, the ID starts afresh.
	p.Add("c", false)
	if ids, _, _ := p.Take(); len(ids) != 1 || ids["c"].Deleted {
		t.Fatalf("take after the deletion was taken = %v", ids)
	}
}

// A flag alone notifies, and a notification taken before the Add is
// followed by another.
func TestPendingFlagNotifies(t *testing.T) {
	p := NewPending()
	p.Flag()
	expectOneNotify(t, p)
	if ids, flagged, _ := p.Take(); len(ids) != 0 || !flagged {
		t.Fatalf("take = %v, %v", ids, flagged)
	}
	p.Add("a", false)
	expectOneNotify(t, p)
}

// Adds from one goroutine while another takes lose nothing.
func TestPendingConcurrent(t *testing.T) {
	p := NewPending()
	const n = 1000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			p.Add(fmt.Sprint(i), i%2 == 0)
		}
	}()
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-p.Notify():
		case <-done:
			finished = true
		}
		ids, _, _ := p.Take()
		for id, ev := range ids {
			seen[id] = ev.Deleted
		}
	}
	if len(seen) != n {
		t.Fatalf("%d IDs taken, want %d", len(seen), n)
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != (i%2 == 0) {
			t.Fatalf("ID %d deleted = %v", i, seen[fmt.Sprint(i)])
		}
	}
}

func TestWrapCall(t *testing.T) {
	if err := WrapCall("GetEvents", nil); err != nil {
		t.Fatalf("WrapCall(nil) = %v, want nil", err)
	}
	err := WrapCall("GetEvents", io.EOF)
	if err.Error() != "GetEvents: EOF" || !errors.Is(err, io.EOF) {
		t.Fatalf("WrapCall = %q, errors.Is(EOF) = %v", err, errors.Is(err, io.EOF))
	}
	if call, cause := Call(fmt.Errorf("session: %w", err)); call != "GetEvents" || !errors.Is(cause, io.EOF) || cause.Error() != "EOF" {
		t.Fatalf("Call(wrapped) = %q, %v", call, cause)
	}
	boom := errors.New("boom")
	if call, cause := Call(boom); call != "" || !errors.Is(cause, boom) || cause.Error() != "boom" {
		t.Fatalf("Call(unwrapped) = %q, %v", call, cause)
	}
	if call, cause := Call(nil); call != "" || cause != nil {
		t.Fatalf("Call(nil) = %q, %v", call, cause)
	}
}

// Same compares every field of catalog.Instance: a field added there must
// be added to it, or a group's re-listing would miss its changes.
func TestSameCoversEveryField(t *testing.T) {
	if n := reflect.TypeOf(catalog.Instance{}).NumField(); n != 11 {
		t.Fatalf("catalog.Instance has %d fields; Same compares 11: update it", n)
	}
	a := catalog.Instance{ID: "a", Name: "a", Labels: map[string]string{"k": "v"}, State: catalog.StateRunning,
		Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.2"}}, Ports: []catalog.PublishedPort{{GuestPort: 80}}}
	if !Same(a, a) {
		t.Fatal("an instance differs from itself")
	}
	for _, change := range []func(*catalog.Instance){
		func(i *catalog.Instance) { i.Name = "b" },
		func(i *catalog.Instance) { i.Labels = map[string]string{"k": "w"} },
		func(i *catalog.Instance) { i.State = catalog.StateStopped },
		func(i *catalog.Instance) { i.Health = catalog.HealthHealthy },
		func(i *catalog.Instance) { i.Networks = []catalog.Attachment{{Network: "n", Address: "10.0.0.3"}} },
		func(i *catalog.Instance) { i.Ports = nil },
		func(i *catalog.Instance) { i.WakeOnConnect = true },
		func(i *catalog.Instance) { i.Group = true },
		func(i *catalog.Instance) { i.Identity = "web.2" },
		func(i *catalog.Instance) { i.Image = "sha256:other" },
	} {
		b := a
		change(&b)
		if Same(a, b) {
			t.Errorf("Same(%+v, %+v) = true", a, b)
		}
	}
}
