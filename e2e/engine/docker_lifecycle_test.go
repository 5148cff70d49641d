package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/lifecycle"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

func init() {
	caddy.RegisterModule(eventRecorder{})
}

// eventRecorder is an events handler of this test package
// (events.handlers.dicer_test_record): it keeps every event it handles,
// with its origin, for the test whose tag it carries.
type eventRecorder struct {
	Tag string `json:"tag,omitempty"`
}

// recordedEvent is one event as a handler in Caddy got it.
type recordedEvent struct {
	Name   string
	Origin string
	Data   map[string]any
}

// recorded holds the events each tag's recorder handled, in order.
var recorded = struct {
	sync.Mutex
	byTag map[string][]recordedEvent
}{byTag: map[string][]recordedEvent{}}

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.dicer_test_record", New: func() caddy.Module { return new(eventRecorder) }}
}

// UnmarshalCaddyfile reads `dicer_test_record <tag>`.
func (r *eventRecorder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if !d.NextArg() {
		return d.ArgErr()
	}
	r.Tag = d.Val()
	return nil
}

// Handle implements caddyevents.Handler.
func (r *eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	origin := ""
	if o := e.Origin(); o != nil {
		origin = string(o.CaddyModule().ID)
	}
	recorded.Lock()
	defer recorded.Unlock()
	recorded.byTag[r.Tag] = append(recorded.byTag[r.Tag], recordedEvent{Name: e.Name(), Origin: origin, Data: e.Data})
	return nil
}

// eventsOf are the events the recorder tagged tag got about the instance
// called name, in order.
func eventsOf(tag, name string) []recordedEvent {
	recorded.Lock()
	defer recorded.Unlock()
	var out []recordedEvent
	for _, e := range recorded.byTag[tag] {
		if e.Data["name"] == name {
			out = append(out, e)
		}
	}
	return out
}

func eventNames(es []recordedEvent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// eventsGlobal is the `events` global option that sends every lifecycle
// event to the recorder tagged tag.
func eventsGlobal(tag string) string {
	var b strings.Builder
	b.WriteString("events {\n")
	for _, name := range lifecycle.Names {
		fmt.Fprintf(&b, "\t\ton %s dicer_test_record %s\n", name, tag)
	}
	b.WriteString("\t}")
	return b.String()
}

// R13e: a handler of Caddy's own events app, configured with the `events`
// global option, hears a container that joins, goes on standby, wakes
// and leaves, in that order, each event with the container's identity.
func TestDocker_R13e_lifecycle_events_reach_Caddys_events_app(t *testing.T) {
	cli := engine(t)
	const name = "r13e-life"
	// The recorder's events are kept by tag for the whole process: a
	// repetition (go test -count) records under a tag of its own.
	app, host, tag := dockertest.Name(name), hostName(name), fresh(dockertest.Name("r13e-tag"))
	tester, _ := dockerCaddy(t, eventsGlobal(tag), standbySite(app, ""))
	c := dockertest.Start(t, cli, dockertest.Options{Name: name, Labels: map[string]string{
		"app": app, "caddy.host": host, "caddy.standby_after": "3s"}})
	ev := testkit.WatchContainer(t, cli, c.ID)
	inspect, err := cli.ContainerInspect(context.Background(), c.ID) // its image, as the adapter reports it: the ID without "sha256:"
	if err != nil {
		t.Fatal(err)
	}
	want := func(names ...string) {
		t.Helper()
		if !testkit.Until(time.Minute, func() bool { return len(eventsOf(tag, c.Name)) >= len(names) }) {
			t.Fatalf("events about %s: %q, want %q", c.Name, eventNames(eventsOf(tag, c.Name)), names)
		}
		if got := eventNames(eventsOf(tag, c.Name)); !slices.Equal(got, names) {
			t.Fatalf("events about %s: %q, want %q", c.Name, got, names)
		}
	}

	// Joined before any request: a request that came while the new
	// container was still created, not yet started, would start it as a
	// wake, and the waking event would come first (truthfully).
	want(lifecycle.Joined)
	answersWithin(t, tester, host, http.StatusOK, hello(name), waitFor)
	want(lifecycle.Joined)
	// Idle for standby_after: out of its rotation, then stopped.
	want(lifecycle.Joined, lifecycle.Left, lifecycle.Standby)
	if !testkit.Until(time.Minute, func() bool { return ev.Count(events.ActionDie) >= 1 }) {
		t.Fatal("no die event after the standby event")
	}
	r, _ := getRetry(host, "/", time.Minute)
	if r.status != http.StatusOK || r.body != hello(name) {
		t.Fatalf("the request that wakes it: %s", r)
	}
	want(lifecycle.Joined, lifecycle.Left, lifecycle.Standby, lifecycle.Waking, lifecycle.Joined)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	want(lifecycle.Joined, lifecycle.Left, lifecycle.Standby, lifecycle.Waking, lifecycle.Joined, lifecycle.Left)

	got := eventsOf(tag, c.Name)
	for i, e := range got {
		if e.Origin != "dicer" {
			t.Errorf("event %d (%s): origin %q, want the dicer app", i, e.Name, e.Origin)
		}
		d := e.Data
		if d["id"] != c.ID || d["daemon_kind"] != "docker" || d["image"] != strings.TrimPrefix(inspect.Image, "sha256:") || d["host"] != host ||
			!slices.Equal(asStrings(d["hosts"]), []string{host}) || d["daemon"] == "" || d["time"] == "" {
			t.Errorf("event %d (%s): data %v, want id %s, daemon_kind docker, image %s, host %s", i, e.Name, d, c.ID, inspect.Image, host)
		}
	}
	for i, check := range []struct {
		key, want string
	}{
		{"why", "running"},      // joined: no health check, its port accepted
		{"why", "idle for"},     // left: Caddy puts it on standby
		{"action", "stop"},      // standby
		{"cause", "request"},    // waking
		{"why", "running"},      // joined again
		{"why", "docker rm -f"}, // left: killed
	} {
		if v, _ := got[i].Data[check.key].(string); !strings.Contains(v, check.want) {
			t.Errorf("event %d (%s): %s = %q, want it to say %q", i, got[i].Name, check.key, v, check.want)
		}
	}
}

func asStrings(v any) []string {
	switch v := v.(type) {
	case []string:
		return v
	case []any:
		out := make([]string, len(v))
		for i, s := range v {
			out[i], _ = s.(string)
		}
		return out
	}
	return nil
}

// R5p: a POST and a PUT of 10 MB sent to a container on standby arrive
// whole and once: the request is held before its body is read, and the
// body is sent once, after the wake.
func TestDocker_R5p_a_body_survives_a_wake(t *testing.T) {
	s := newStandbyCase(t, "r5p-body", dockertest.Options{NoStart: true,
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "wake_timeout 60s")
	body := make([]byte, 10<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	for i, method := range []string{http.MethodPost, http.MethodPut} {
		if i == 1 { // on standby again for the PUT
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := s.cli.ContainerStop(ctx, s.c.ID, container.StopOptions{})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "Caddy's catalog shows "+s.c.Name+" stopped", func() bool {
				var list []diceradmin.InstanceStatus
				adminJSON(t, "/dicer/instances", &list)
				for _, st := range list {
					if st.Name == s.c.Name {
						return st.DaemonState == "stopped"
					}
				}
				return false
			})
		}
		starts := s.ev.Count(events.ActionStart)
		status, got := postSHA256(t, s.tester.Client, method, s.host, body)
		want := fmt.Sprintf("sha256=%s bytes=%d count=%d\n", hex.EncodeToString(sum[:]), len(body), 1)
		if status != http.StatusOK || got != want {
			t.Errorf("%s of 10 MB through a wake: %d %q, want 200 %q (the whole body, once)", method, status, got, want)
		}
		if n := s.ev.Count(events.ActionStart); n != starts+1 {
			t.Errorf("%s: %d start events, want 1 (one wake)", method, n-starts)
		}
	}
}

// R5o: a container removed while on standby (docker rm) leaves its host
// answering 503 that says which container was removed, when, and that
// nothing will wake it; the admin API (caddy dicer removed) lists it,
// until a new container claims the host.
func TestDocker_R5o_a_sleeper_removed_says_so(t *testing.T) {
	cli := engine(t)
	const name = "r5o-gone"
	app, host := dockertest.Name(name), hostName(name)
	tester, _ := dockerCaddy(t, "", standbySite(app, ""))
	c := dockertest.Start(t, cli, dockertest.Options{Name: name, NoStart: true, Labels: map[string]string{
		"app": app, "caddy.host": host, "caddy.standby_after": "1h"}})
	awaitListed(t, app)
	asleep := time.Now()
	// On standby for over 2 s: docker rm -f of a running container stops it
	// a moment before; this one sleeps.
	time.Sleep(2500 * time.Millisecond) // the catalog's own 2 s, not a wait for a condition
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	var list []diceradmin.RemovedSleeper
	eventually(t, "GET /dicer/removed lists "+c.Name, func() bool {
		adminJSON(t, "/dicer/removed", &list)
		return slices.ContainsFunc(list, func(r diceradmin.RemovedSleeper) bool { return r.ID == c.ID })
	})
	i := slices.IndexFunc(list, func(r diceradmin.RemovedSleeper) bool { return r.ID == c.ID })
	r := list[i]
	if r.Name != c.Name || !slices.Equal(r.Hosts, []string{host}) || r.Kind != "docker" ||
		r.RemovedAt.Before(asleep) || r.RemovedAt.After(time.Now()) || r.ListedUntil.Sub(r.RemovedAt) != 24*time.Hour ||
		!strings.Contains(r.Message, "nothing will wake it") {
		t.Errorf("/dicer/removed: %+v", r)
	}

	// The host: 503 saying so, as text and as the page.
	plain, _ := getRetry(host, "/", 10*time.Second)
	if plain.status != http.StatusServiceUnavailable || !strings.Contains(plain.body, "removed: Its container "+c.Name+" ("+c.ID[:12]+") was removed at ") ||
		!strings.Contains(plain.body, "nothing will wake it") {
		t.Errorf("GET %s: %s, want 503 saying %s was removed and nothing will wake it", host, plain, c.Name)
	}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
	req.Host = host
	req.Header.Set("Accept", "text/html")
	resp, err := tester.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(page), "was removed</h1>") ||
		!strings.Contains(string(page), c.Name) {
		t.Errorf("the page for %s: %d %q", host, resp.StatusCode, page)
	}

	// A new container claims the host: it is served, and no longer listed.
	dockertest.Start(t, cli, dockertest.Options{Name: name + "-new", Labels: map[string]string{"app": app, "caddy.host": host}})
	answersWithin(t, tester, host, http.StatusOK, hello(name+"-new"), waitFor)
	adminJSON(t, "/dicer/removed", &list)
	if slices.ContainsFunc(list, func(r diceradmin.RemovedSleeper) bool { return r.ID == c.ID }) {
		t.Errorf("/dicer/removed still lists %s once its host is claimed again", c.Name)
	}
}

// hashed counts the requests for /sha256 an instance process of a
// dicertest.Host served.
var hashed atomic.Int64

// serveSHA256 answers as the hello image's /sha256 does: the body's
// SHA-256, its length and this process's count of such requests.
func serveSHA256(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	k := hashed.Add(1)
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = fmt.Fprintf(w, "sha256=%s bytes=%d count=%d\n", hex.EncodeToString(h.Sum(nil)), n, k)
}

// postSHA256 sends body by method to Caddy's /sha256 for host, and
// returns the status and the answer.
func postSHA256(t *testing.T, client *http.Client, method, host string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d/sha256", httpPort), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s /sha256 of %d bytes for %s: %v", method, len(body), host, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

// R5p on Dicer, against the repository's test daemon (a dicertest.Host,
// which wakes an instance on standby when a connection reaches its
// published port, as Dicer does): a POST of 10 MB to the instance on
// standby arrives whole and once, and wakes it once.
func TestCaddy_R5p_dicer_body_survives_a_wake(t *testing.T) {
	needsCaddy(t)
	h, sock := testHost(t, 300*time.Millisecond)
	const host, name = "body.test", "body-a"
	port := testkit.FreePort(t, "127.0.0.171")
	if _, err := h.Run(dicertest.InstanceSpec{Name: name, IP: "127.0.0.171", Port: port, StandbyAfter: time.Minute,
		Labels:  map[string]string{"caddy.host": host},
		Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port), Protocol: dicerpb.Protocol_PROTOCOL_TCP}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Standby(name); err != nil {
		t.Fatal(err)
	}
	tester, _ := startCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic dicer {
			address unix:%s
		}
	}
}`, host, httpPort, sock))
	body := make([]byte, 10<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	status, got := postSHA256(t, tester.Client, http.MethodPost, host, body)
	want := fmt.Sprintf("sha256=%s bytes=%d count=1\n", hex.EncodeToString(sum[:]), len(body))
	if status != http.StatusOK || got != want {
		t.Errorf("POST of 10 MB through a wake on Dicer: %d %q, want 200 %q (the whole body, once)", status, got, want)
	}
	if ports := wokenByConnect(h, name); len(ports) != 1 {
		t.Errorf("%s woken by connections to %v, want one wake", name, ports)
	}
}

var _ caddyevents.Handler = (*eventRecorder)(nil)
