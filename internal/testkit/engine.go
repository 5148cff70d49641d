package testkit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Events records the Docker Engine's events that match a filter, from the
// moment it is made until its test ends.
type Events struct {
	mu   sync.Mutex
	seen []events.Message
}

// WatchEvents records the Engine's events that match args (as `docker
// events --filter`) until t ends.
//
//	ev := testkit.WatchEvents(t, cli, filters.NewArgs(filters.Arg("type", "container"), filters.Arg("container", id)))
func WatchEvents(t testing.TB, cli client.APIClient, args filters.Args) *Events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	msgs, errs := cli.Events(ctx, events.ListOptions{Filters: args})
	ev := &Events{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-msgs:
				ev.mu.Lock()
				ev.seen = append(ev.seen, m)
				ev.mu.Unlock()
			case <-errs:
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ev
}

// WatchContainer records the Engine's events about the container id.
func WatchContainer(t testing.TB, cli client.APIClient, id string) *Events {
	t.Helper()
	return WatchEvents(t, cli, filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("container", id)))
}

// Count is the number of events with this action so far.
func (e *Events) Count(action events.Action) int {
	n := 0
	e.each(func(m events.Message) bool {
		if m.Action == action {
			n++
		}
		return true
	})
	return n
}

// First is the time of the first event so far with this action for which
// match (if not nil) holds.
func (e *Events) First(action events.Action, match func(events.Message) bool) (time.Time, bool) {
	var at time.Time
	found := false
	e.each(func(m events.Message) bool {
		if m.Action == action && (match == nil || match(m)) {
			at, found = time.Unix(0, m.TimeNano), true
			return false
		}
		return true
	})
	return at, found
}

// Await is the time of the first event with this action for which match
// (if not nil) holds, waiting for it up to timeout; ok is false if none
// came. An event may arrive after the state it reports can be inspected:
// Podman sends its events 50 to 100 ms late (docs/podman.md).
func (e *Events) Await(action events.Action, match func(events.Message) bool, timeout time.Duration) (at time.Time, ok bool) {
	Until(timeout, func() bool {
		at, ok = e.First(action, match)
		return ok
	})
	return at, ok
}

// Times are the Engine's times of the events whose action starts with
// prefix ("restart", "health_status: unhealthy"), in order.
func (e *Events) Times(prefix string) []time.Time {
	var ts []time.Time
	e.each(func(m events.Message) bool {
		if strings.HasPrefix(string(m.Action), prefix) {
			ts = append(ts, time.Unix(0, m.TimeNano))
		}
		return true
	})
	return ts
}

// All is the events seen so far, in order.
func (e *Events) All() []events.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

// each calls f on the events seen so far, in order, until f returns false.
func (e *Events) each(f func(events.Message) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.seen {
		if !f(m) {
			return
		}
	}
}

// ContainerState is the container's state word as the Engine says it
// ("running", "exited", "paused", ...).
func ContainerState(t testing.TB, cli client.APIClient, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return in.State.Status
}

// WaitState waits up to within until the Engine says the container id
// (called name in the failure) is in state, polling every 50 ms.
func WaitState(t testing.TB, cli client.APIClient, id, name, state string, within time.Duration) {
	t.Helper()
	var got string
	if !UntilEvery(within, 50*time.Millisecond, func() bool {
		got = ContainerState(t, cli, id)
		return got == state
	}) {
		t.Fatalf("%s is %s, not %s, after %s", name, got, state, within)
	}
}

// WaitHealth waits up to within until the Engine reports the health of
// the container id (called name in the failure) as want ("healthy",
// "unhealthy", "starting").
func WaitHealth(t testing.TB, cli client.APIClient, id, name, want string, within time.Duration) {
	t.Helper()
	var got string
	Eventually(t, within, fmt.Sprintf("%s is %s (Engine)", name, want), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != nil && in.State.Health != nil {
			got = in.State.Health.Status
		}
		return got == want
	})
}

// ContainerIP is the address of the container id on the named network
// ("" for the default bridge); a container with none there fails t.
func ContainerIP(t testing.TB, cli client.APIClient, id, network string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if network == "" {
		network = "bridge"
		// Podman names its default network "podman", not "bridge": a
		// container on one network only is on the default one.
		if _, ok := in.NetworkSettings.Networks[network]; !ok && len(in.NetworkSettings.Networks) == 1 {
			for name := range in.NetworkSettings.Networks {
				network = name
			}
		}
	}
	ep := in.NetworkSettings.Networks[network]
	if ep == nil || ep.IPAddress == "" {
		t.Fatalf("%s has no address on %s: %v", in.Name, network, in.NetworkSettings.Networks)
	}
	return ep.IPAddress
}
