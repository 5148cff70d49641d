package standby

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// replacement is the container that took sleeper's place (compose's
// recreate, a test run again): same name and labels, a new ID.
func replacement(state catalog.State) catalog.Instance {
	in := sleeper(state)
	in.ID = "id-b"
	if state == catalog.StateRunning {
		in.Networks[0].Address = "10.0.0.3"
	}
	return in
}

// R5c: the container to wake was removed and the catalog has not heard
// yet (Podman's events come 50 to 100 ms late); its replacement is
// created meanwhile, and heard of later still. The held request wakes the
// replacement and gets it: no 503, no backoff, and the removed one is not
// tried again.
func TestStandby_R5c_gone_container_wakes_its_replacement(t *testing.T) {
	f := &fakeActions{}
	w, cat, logs := newTestStandby(t, f)
	f.then = func(_, id string) error {
		if id == "id-a" {
			go func() {
				time.Sleep(50 * time.Millisecond) // the removal and the create, heard late
				cat.Delete("id-a")
				cat.Put(replacement(catalog.StateStopped))
			}()
			return errGone
		}
		go cat.Put(replacement(catalog.StateRunning))
		return nil
	}
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	ts, retry := w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil)
	if len(ts) != 1 || ts[0].Dial != "10.0.0.3:8080" || retry != 0 {
		t.Fatalf("targets %v, Retry-After %s; want the replacement at 10.0.0.3", ts, retry)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d start calls, want 2 (the removed one, then its replacement)", n)
	}
	if n := logs.FilterMessageSnippet("is gone").Len(); n != 1 {
		t.Errorf("%d log lines for the removed container, want 1", n)
	}
	if n := logs.FilterMessageSnippet("wake failed").Len(); n != 0 {
		t.Errorf("%d 'wake failed' lines: a removed container is no failed wake", n)
	}
}

// R5c: removed, with nothing to take its place: after goneGrace (the
// time a replacement's create event has to be heard, Podman's late) the
// request gets the plain 503 of a route with nothing to wake, whether the
// catalog had the removal by then or not; not a Retry-After of a
// container's backoff.
func TestStandby_R5c_gone_container_alone_is_a_plain_503(t *testing.T) {
	for _, heard := range []bool{true, false} {
		f := &fakeActions{then: func(string, string) error { return errGone }}
		w, cat, _ := newTestStandby(t, f)
		if heard {
			f.then = func(string, string) error {
				go func() { time.Sleep(50 * time.Millisecond); cat.Delete("id-a") }()
				return errGone
			}
		}
		cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
		start := time.Now()
		ts, retry := w.Hold(context.Background(), catalog.Route{Port: 8080}, "h", 5*time.Second, nil)
		took := time.Since(start)
		if len(ts) != 0 || retry != 0 {
			t.Errorf("removal heard %v: targets %v, Retry-After %s; want none, a plain 503", heard, ts, retry)
		}
		if took < goneGrace || took > goneGrace+time.Second {
			t.Errorf("removal heard %v: held %s, want about goneGrace (%s)", heard, took, goneGrace)
		}
		if n := f.calls.Load(); n != 1 {
			t.Errorf("removal heard %v: %d start calls, want 1", heard, n)
		}
	}
}
