package connection

import (
	"context"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// countingActions counts the Engine's starts and answers each with nothing
// (the instance stays stopped in the catalog).
type countingActions struct{ starts atomic.Int32 }

func (a *countingActions) Start(context.Context, string, map[string]string) error {
	a.starts.Add(1)
	return nil
}
func (a *countingActions) Stop(context.Context, string, map[string]string) error    { return nil }
func (a *countingActions) Pause(context.Context, string, map[string]string) error   { return nil }
func (a *countingActions) Unpause(context.Context, string, map[string]string) error { return nil }
func (a *countingActions) Denied(error) bool                                        { return false }
func (a *countingActions) Gone(error) bool                                          { return false }
func (a *countingActions) Unreachable(error) bool                                   { return false }
func (a *countingActions) Close() error                                             { return nil }

// testRoute is a route on a connection, as an upstream source is.
type testRoute struct{ route catalog.Route }

func (r testRoute) CloseIdle()                  {}
func (r testRoute) CatalogRoute() catalog.Route { return r.route }
func (r testRoute) Selects() string             { return "" }
func (r testRoute) Targets(snap *catalog.Snapshot, host, _ string) ([]catalog.Target, bool) {
	return snap.Targets(nil, r.route, host), false
}

func stopped(name string, labels map[string]string) catalog.Instance {
	labels[catalog.LabelStandbyAfter] = "1h"
	return catalog.Instance{ID: "id-" + name, Name: name, State: catalog.StateStopped, Labels: labels,
		Networks: []catalog.Attachment{{Network: "n"}}}
}

// R5n: on a selector route, which would route any host to its
// instances, a ClientHello pre-wakes only an instance whose caddy.host
// lists the name, or for a name the route held a request of: never for a
// name a client makes up.
func TestPreWake_R5n_selector_route_wakes_only_claimed_or_learned_hosts(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	acts := &countingActions{}
	ctx, cancel := context.WithCancel(context.Background())
	w := standby.New(ctx, acts, cat, zap.NewNop(), standby.Options{})
	t.Cleanup(func() { cancel(); w.Close() })
	c := Fixture{Kind: "docker", Address: "test", Catalog: cat, Standby: w}.Conn()
	cat.Replace([]catalog.Instance{
		stopped("web", map[string]string{"app": "web"}),
		stopped("shop", map[string]string{"app": "shop", catalog.LabelHost: "shop.example.test"}),
	})
	web := catalog.Route{Port: 8080, View: cat.Watch(selector.MustParse("app=web"))}
	shop := catalog.Route{Port: 8080, View: cat.Watch(selector.MustParse("app=shop"))}
	c.AddRoute(testRoute{web}, "web")
	c.AddRoute(testRoute{shop}, "shop")

	if got := c.PreWake("made-up.example.test"); got != standby.PreWakeNothing {
		t.Errorf("a made-up name: %d", got)
	}
	if got := c.PreWake("web.example.test"); got != standby.PreWakeNothing {
		t.Errorf("a name the selector route never held: %d", got)
	}
	if acts.starts.Load() != 0 {
		t.Fatalf("%d starts", acts.starts.Load())
	}
	if got := c.PreWake("shop.example.test"); got != standby.PreWakeStarted {
		t.Errorf("a name the instance lists: %d, want started", got)
	}
	c.learned.learn(web, "web.example.test") // as Hold does
	if got := c.PreWake("web.example.test"); got != standby.PreWakeStarted {
		t.Errorf("a name the route held a request of: %d, want started", got)
	}
}

// R5n: the hosts a connection learns are bounded, the oldest forgotten.
func TestLearnedHosts_R5n_bounded(t *testing.T) {
	var l learnedHosts
	route := catalog.Route{View: new(catalog.View)}
	for i := range maxLearnedHosts + 10 {
		l.learn(route, string(rune('a'+i%26))+string(rune(i)))
	}
	if len(l.set) != maxLearnedHosts || len(l.order) != maxLearnedHosts {
		t.Errorf("%d hosts kept, %d in order", len(l.set), len(l.order))
	}
	l.learn(catalog.Route{}, "no-selector") // a route without a selector learns nothing
	if l.has(catalog.Route{}, "no-selector") {
		t.Error("learned on a route without a selector")
	}
}
