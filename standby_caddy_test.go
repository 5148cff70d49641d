package caddydicer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// The scale-to-zero pieces that touch Caddy: settings, GetUpstreams with
// a standby.Waker, reverse_proxy's in-flight counter. The engine's own
// tests are in internal/standby; those with the Engine in
// docker_standby_*_test.go.

// fakeActions stands for the Engine's writes: each call is counted and
// answered by then (nil: nil), which may change the catalog as the
// Engine's events would.
type fakeActions struct {
	calls atomic.Int32
	then  func(action, id string) error
}

func (f *fakeActions) do(action, id string) error {
	f.calls.Add(1)
	if f.then == nil {
		return nil
	}
	return f.then(action, id)
}

func (f *fakeActions) Start(_ context.Context, id string, _ map[string]string) error {
	return f.do("start", id)
}

func (f *fakeActions) Stop(_ context.Context, id string, _ map[string]string) error {
	return f.do("stop", id)
}

func (f *fakeActions) Pause(_ context.Context, id string, _ map[string]string) error {
	return f.do("pause", id)
}

func (f *fakeActions) Unpause(_ context.Context, id string, _ map[string]string) error {
	return f.do("unpause", id)
}
func (f *fakeActions) Denied(error) bool      { return false }
func (f *fakeActions) Gone(error) bool        { return false }
func (f *fakeActions) Unreachable(error) bool { return false }
func (f *fakeActions) Close() error           { return nil }

// sleeper is a container labelled caddy.standby_after=1h serving host h.
func sleeper(state catalog.State) catalog.Instance {
	in := catalog.Instance{ID: "id-a", Name: "a", State: state,
		Labels:   map[string]string{catalog.LabelHost: "h", catalog.LabelStandbyAfter: "1h"},
		Networks: []catalog.Attachment{{Network: "n"}}}
	if state == catalog.StateRunning {
		in.Networks[0].Address = "10.0.0.2"
	}
	return in
}

func newTestStandby(t *testing.T, f *fakeActions) (*standby.Waker, *catalog.Catalog) {
	t.Helper()
	cat := catalog.New(catalog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := standby.New(ctx, f, cat, zap.NewNop(), standby.Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	return w, cat
}

// wake_timeout in the Caddyfile and in JSON: a positive duration, given
// once; default 30s.
func TestStandby_wake_timeout_setting(t *testing.T) {
	u := new(DockerUpstreams)
	if err := u.UnmarshalCaddyfile(caddyfile.NewTestDispenser("docker app=web 8080 {\n wake_timeout 1m30s\n}")); err != nil {
		t.Fatal(err)
	}
	if u.WakeTimeout != caddy.Duration(90*time.Second) {
		t.Errorf("wake_timeout %s", time.Duration(u.WakeTimeout))
	}
	if got, _ := json.Marshal(u); !strings.Contains(string(got), `"wake_timeout":90000000000`) {
		t.Errorf("JSON %s has no wake_timeout", got)
	}
	var fromJSON DockerUpstreams
	if err := caddy.StrictUnmarshalJSON([]byte(`{"wake_timeout":"45s"}`), &fromJSON); err != nil || fromJSON.WakeTimeout != caddy.Duration(45*time.Second) {
		t.Errorf("JSON wake_timeout: %v, %s", err, time.Duration(fromJSON.WakeTimeout))
	}
	for input, want := range map[string]string{
		"docker {\n wake_timeout soon\n}":                 `wake_timeout: "soon" is not a positive duration`,
		"docker {\n wake_timeout 0s\n}":                   `wake_timeout: "0s" is not a positive duration`,
		"docker {\n wake_timeout 1s\n wake_timeout 2s\n}": "wake_timeout has already been specified",
		"docker {\n wake_timeout\n}":                      "wrong argument count",
	} {
		err := new(DockerUpstreams).UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", input, err, want)
		}
	}
	neg := &DockerUpstreams{WakeTimeout: caddy.Duration(-time.Second)}
	if err := neg.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), "wake_timeout") {
		t.Errorf("negative JSON wake_timeout: %v", err)
	}
	if err := new(DockerPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser("docker {\n wake_timeout 1s\n}")); err == nil {
		t.Error("the permission took wake_timeout, a route setting")
	}
}

// shopOfThree is a catalog of three running instances for the host
// shop.example.com, each with the label key=value (none if key is empty),
// for the GetUpstreams benchmarks.
func shopOfThree(key, value string) *catalog.Catalog {
	cat := catalog.New(catalog.Options{})
	var all []catalog.Instance
	for i := range 3 {
		labels := map[string]string{"caddy.host": "shop.example.com"}
		if key != "" {
			labels[key] = value
		}
		all = append(all, catalog.Instance{ID: fmt.Sprint(i), Name: fmt.Sprint("web-", i), Labels: labels, State: catalog.StateRunning,
			Networks: []catalog.Attachment{{Network: "n", Address: fmt.Sprintf("10.0.0.%d", i+2)}}})
	}
	cat.Replace(all)
	return cat
}

// benchShopUpstreams runs, as sub-benchmark name, u's GetUpstreams for
// shop.example.com, once reverse_proxy's in-flight counters of its
// targets are known (inFlight requests at each), and checks each answer
// has the three instances of shopOfThree.
func benchShopUpstreams(b *testing.B, name string, u *upstreamSource, get func(*http.Request) ([]*reverseproxy.Upstream, error), inFlight int) {
	for _, t := range u.conn.Catalog().Snapshot().Targets(nil, u.route, "shop.example.com") {
		if t.Activity != nil {
			t.Activity.Begin()
			t.Activity.Learn(t.Dial, fixedInFlight(inFlight))
		}
	}
	req := httptest.NewRequest(http.MethodGet, "http://shop.example.com/", nil)
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ups, _ := get(req); len(ups) != 3 {
				b.Fatalf("got %d upstreams, want 3", len(ups))
			}
		}
	})
}

// BenchmarkGetUpstreamsStandby is GetUpstreams for a route of three
// running containers, labelled caddy.standby_after or not, on a Docker-like
// connection (with scale to zero): the price of recording activity, once
// reverse_proxy's in-flight counters are known; and in a fleet (a storage
// shared, R5m), whose leases are written off the request path.
func BenchmarkGetUpstreamsStandby(b *testing.B) {
	for _, c := range []struct{ labelled, fleet bool }{{false, false}, {true, false}, {true, true}} {
		key := ""
		if c.labelled {
			key = catalog.LabelStandbyAfter
		}
		cat := shopOfThree(key, "15m")
		ctx, cancel := context.WithCancel(context.Background())
		w := standby.New(ctx, &fakeActions{}, cat, zap.NewNop(), standby.Options{})
		conn := connection.Fixture{Catalog: cat, Standby: w}.Conn()
		if c.fleet {
			conn.ShareThrough(&fleet.Memory{}, fleet.Self{ID: "bench"})
		}
		u := &DockerUpstreams{upstreamSource: upstreamSource{conn: conn, route: catalog.Route{Port: 8080}}}
		benchShopUpstreams(b, fmt.Sprintf("labelled=%v/fleet=%v", c.labelled, c.fleet), &u.upstreamSource, u.GetUpstreams, 0)
		cancel()
		_ = conn.Destruct() // closes w

	}
}

// R5b with a daemon whose instances Caddy wakes (Docker): in one `dynamic
// multi`, a source whose only instance for the host is stopped wakes
// nothing while another source has a routable one; once none has, it
// wakes its own, once, and the request waits for it.
func TestStandby_R5b_multi_wakes_only_when_no_source_serves(t *testing.T) {
	f := &fakeActions{}
	w, cat := newTestStandby(t, f)
	f.then = func(string, string) error {
		go cat.Put(sleeper(catalog.StateRunning)) // the Engine's event
		return nil
	}
	cat.Replace([]catalog.Instance{sleeper(catalog.StateStopped)})
	docker := &upstreamSource{conn: connection.Fixture{Catalog: cat, Standby: w}.Conn(), route: catalog.Route{Port: 8080}, wakeTimeout: 5 * time.Second}
	other := member(t, "", routed("b-0", "10.0.2.1", catalog.LabelHost, "h"))
	grouped(docker, other)
	req := func() []*reverseproxy.Upstream {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "http://h/", nil)
		ups, err := docker.GetUpstreams(r)
		if err != nil {
			t.Fatal(err)
		}
		return ups
	}

	if ups := req(); len(ups) != 0 || f.calls.Load() != 0 {
		t.Fatalf("with another daemon serving h: %d upstreams and %d start calls, want none and none", len(ups), f.calls.Load())
	}
	other.conn.Catalog().Delete("b-0")
	ups := req()
	if len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" {
		t.Fatalf("with no daemon serving h: upstreams %v, want the woken container", ups)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d start calls, want 1", n)
	}
}

// max_wakes and max_held (R5d) in the Caddyfile and in JSON: positive
// integers, given once; they make a connection of their own, and every
// connection to one Engine shares its scale-to-zero state (R5f).
func TestStandby_max_wakes_and_max_held_settings(t *testing.T) {
	u := new(DockerUpstreams)
	if err := u.UnmarshalCaddyfile(caddyfile.NewTestDispenser("docker app=web 8080 {\n max_wakes 8\n max_held 200\n}")); err != nil {
		t.Fatal(err)
	}
	if u.MaxWakes != 8 || u.MaxHeld != 200 {
		t.Errorf("max_wakes %d, max_held %d", u.MaxWakes, u.MaxHeld)
	}
	if got, _ := json.Marshal(u); !strings.Contains(string(got), `"max_wakes":8`) || !strings.Contains(string(got), `"max_held":200`) {
		t.Errorf("JSON %s", got)
	}
	for input, want := range map[string]string{
		"docker {\n max_wakes 0\n}":               `max_wakes: "0" is not a positive integer`,
		"docker {\n max_held many\n}":             `max_held: "many" is not a positive integer`,
		"docker {\n max_wakes 1\n max_wakes 2\n}": "max_wakes has already been specified",
		"docker {\n max_held\n}":                  "wrong argument count",
	} {
		err := new(DockerUpstreams).UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", input, err, want)
		}
	}
	if err := (&DockerEngine{MaxWakes: -1}).validateStatic(); err == nil || !strings.Contains(err.Error(), "max_wakes") {
		t.Errorf("negative JSON max_wakes: %v", err)
	}
	plain, err := resolve(&DockerEngine{EngineConnection: EngineConnection{Address: "unix:///run/x.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	capped, err := resolve(&DockerEngine{EngineConnection: EngineConnection{Address: "unix:///run/x.sock"}, MaxWakes: 2, PublishedPortHost: "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.key == capped.key || plain.standbyEngine != capped.standbyEngine {
		t.Errorf("keys %s and %s, engines %q and %q: want two connections sharing one Engine's state",
			plain.key, capped.key, plain.standbyEngine, capped.standbyEngine)
	}
}

type fixedInFlight int

func (n fixedInFlight) NumRequests() int { return int(n) }

// recordUse learns reverse_proxy's in-flight counter of a request's upstream
// (its Host) once the request ended, if reverse_proxy filled it in (the
// upstream placeholders are set): then the dial address is known and the
// next request does not learn it again; else it is not known.
func TestStandby_record_learns_reverse_proxys_host(t *testing.T) {
	w, _ := newTestStandby(t, &fakeActions{})
	const dial = "10.0.0.2:8080"
	for _, filledIn := range []bool{true, false} {
		act := catalog.NewActivity() // a labelled instance's
		repl := caddy.NewReplacer()
		if filledIn {
			repl.Set("http.reverse_proxy.upstream.hostport", dial)
		}
		ctx, end := context.WithCancel(context.WithValue(context.Background(), caddy.ReplacerCtxKey, repl))
		r := httptest.NewRequest(http.MethodGet, "http://h/", nil).WithContext(ctx)
		recordUse(connection.Fixture{Standby: w}.Conn(), r, act, &reverseproxy.Upstream{Dial: dial, Host: new(reverseproxy.Host)})
		if act.InFlight() != 1 {
			t.Fatalf("filled in %v: in flight %d before the request ended, want 1", filledIn, act.InFlight())
		}
		end()
		for deadline := time.Now().Add(5 * time.Second); act.InFlight() != 0; {
			if time.Now().After(deadline) {
				t.Fatalf("filled in %v: an ended request still counts in flight", filledIn)
			}
			time.Sleep(time.Millisecond) // a request's end runs in a goroutine of its context's
		}
		if learns := act.Learning(dial, time.Now()); learns == filledIn {
			t.Errorf("filled in %v: the next request learns the counter again (%v)", filledIn, learns)
		}
	}
}
