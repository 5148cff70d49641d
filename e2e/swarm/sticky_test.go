//go:build e2e && linux

package swarm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// stickyHost is the caddyfile's site routed with lb_policy dicer_sticky.
const stickyHost = "sticky.swarm.test"

// taskAnswer is what a task of a service made with taskNameEnv answers:
// its slot (the identity dicer_sticky keys sessions by on Swarm, with the
// service's name) and its task ID (another for every new task).
type taskAnswer struct{ slot, task string }

// taskNameEnv makes each task answer "hello from <slot> <task ID>".
const taskNameEnv = "NAME={{.Task.Slot}} {{.Task.ID}}"

// parseTaskAnswer reads a body "hello from <slot> <task ID>".
func parseTaskAnswer(body string) (taskAnswer, bool) {
	slot, task, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(body), "hello from "), " ")
	return taskAnswer{slot, task}, ok && slot != "" && task != ""
}

// stickyClient is a browser: its own cookie jar, and the slot its
// session is on.
type stickyClient struct {
	client *http.Client
	at     string // the slot that answered last
	moves  int    // answers from another slot than the one before
}

func newStickyClients(t *testing.T, n int) []*stickyClient {
	t.Helper()
	out := make([]*stickyClient, n)
	for i := range out {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &stickyClient{client: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
	}
	return out
}

// visit sends one request for the sticky host with the client's cookies,
// counts a move when another slot answers than the last time, and fails
// the test unless one of the tasks in current answered.
func (c *stickyClient) visit(t *testing.T, current map[string]bool) taskAnswer {
	t.Helper()
	r := testkit.Caddy{Addr: caddyAddr, Client: c.client}.Get(context.Background(), stickyHost, "/")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %q %v", stickyHost, r.Status, r.Body, r.Err)
	}
	a, ok := parseTaskAnswer(r.Body)
	if !ok || !current[a.task] {
		t.Fatalf("GET %s answered %q, not by one of the current tasks %v", stickyHost, r.Body, current)
	}
	if c.at != "" && a.slot != c.at {
		c.moves++
	}
	c.at = a.slot
	return a
}

// taskIDs returns the IDs of the service's running tasks, waiting until
// there are n.
func taskIDs(t *testing.T, s svc, n int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, tk := range waitRunning(t, s, n) {
		out[tk.ID] = true
	}
	return out
}

// waitFreshServedBy waits until requests with no cookie (new sessions)
// are answered by exactly the tasks in want.
func waitFreshServedBy(t *testing.T, want map[string]bool) {
	t.Helper()
	c := testkit.Caddy{Addr: caddyAddr, Client: httpClient}
	var seen map[string]int
	var failed int
	if !testkit.UntilEvery(time.Minute, 100*time.Millisecond, func() bool {
		seen, failed = map[string]int{}, 0
		for range 8 * len(want) {
			r := c.Get(context.Background(), stickyHost, "/")
			a, ok := parseTaskAnswer(r.Body)
			if r.Err != nil || r.Status != http.StatusOK || !ok {
				failed++
				continue
			}
			seen[a.task]++
		}
		return failed == 0 && slices.Equal(slices.Sorted(keys(seen)), slices.Sorted(keys(want)))
	}) {
		t.Fatalf("new sessions answered by tasks %v (%d failed), want %v; Caddy's log:\n%s", seen, failed, want, caddyLog("sticky"))
	}
}

// R4d on Swarm: a task's identity is its service and slot. 100 clients,
// each with its own cookie jar, keep their sessions across two `docker
// service update --force` (new tasks, new overlay addresses, the same
// slots): 0 session moves. After `--replicas 1` removes a slot, the
// sessions on it move once, and those on the remaining slot stay.
func TestSwarm_R4d_sticky_sessions_survive_force_updates(t *testing.T) {
	s := createServiceFor(t, "sticky", stickyHost, helloV1, 2, "--env", taskNameEnv)
	current := taskIDs(t, s, 2)
	waitFreshServedBy(t, current)

	const n = 100
	clients := newStickyClients(t, n)
	per := map[string]int{}
	for _, c := range clients {
		c.visit(t, current)
		per[c.at]++
	}
	for _, c := range clients { // the cookie keeps each on its slot
		c.visit(t, current)
	}
	t.Logf("%d sessions by slot: %v", n, per)
	if len(per) != 2 {
		t.Fatalf("%d sessions all on slots %v: the fallback placed none on the other", n, per)
	}

	for gen := 1; gen <= 2; gen++ {
		// Stop-first update, no request in the gap: the slot is missing
		// only while no one asks.
		if out, err := docker(5*time.Minute, "service", "update", "--force", "--quiet", "--no-resolve-image", s.name); err != nil {
			t.Fatalf("docker service update --force: %v\n%s", err, out)
		}
		next := taskIDs(t, s, 2)
		for id := range next {
			if current[id] {
				t.Fatalf("update %d: task %s still runs, want new tasks", gen, id)
			}
		}
		current = next
		waitFreshServedBy(t, current)
		for _, c := range clients {
			c.visit(t, current)
		}
	}
	moved := 0
	for _, c := range clients {
		moved += c.moves
	}
	t.Logf("session moves across two forced updates: %d", moved)
	if moved != 0 {
		t.Fatalf("%d sessions moved across two forced updates, want 0", moved)
	}

	if out, err := docker(5*time.Minute, "service", "update", "--replicas", "1", "--quiet", s.name); err != nil {
		t.Fatalf("docker service update --replicas 1: %v\n%s", err, out)
	}
	current = taskIDs(t, s, 1)
	waitFreshServedBy(t, current)
	var kept string
	for _, tk := range waitRunning(t, s, 1) {
		kept = fmt.Sprint(tk.Slot)
	}
	gone := ""
	for slot := range per {
		if slot != kept {
			gone = slot
		}
	}
	for range 3 {
		for _, c := range clients {
			c.visit(t, current)
		}
	}
	moved = 0
	for i, c := range clients {
		moved += c.moves
		if c.moves > 1 || c.at != kept {
			t.Errorf("client %d: %d moves, now on slot %s", i, c.moves, c.at)
		}
	}
	t.Logf("slot %s removed: %d session moves over 3 rounds, its sessions %d", gone, moved, per[gone])
	if moved != per[gone] {
		t.Errorf("%d sessions moved after slot %s left, want its %d", moved, gone, per[gone])
	}
}
