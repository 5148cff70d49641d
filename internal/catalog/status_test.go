package catalog_test

import (
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// verdicts is each instance's verdict, by name.
func verdicts(c *catalog.Catalog) map[string]string {
	out := map[string]string{}
	for _, st := range c.Instances(nil) {
		out[st.Name] = st.Verdict
	}
	return out
}

// TestInstances_verdicts: the admin API's verdict says why an instance
// gets no requests, in words a user can act on (R1, R1a, R3, R5, R11).
func TestInstances_verdicts(t *testing.T) {
	c := catalog.New(catalog.Options{Probe: func(catalog.ProbeRequest) {}}) // a probe that never answers
	c.Replace([]catalog.Instance{
		inst("ok", port("8080"), health(catalog.HealthHealthy)),
		inst("sick", port("8080"), health(catalog.HealthUnhealthy)),
		inst("badport", port("abc")),
		inst("ambiguous", port("8080"), networks(front, back)),
		inst("noport"),
		inst("several", publish("", 3000, 80), publish("", 3001, 443)),
		inst("probing", port("8080")),
		inst("asleep", port("8080"), standby()),
		inst("paused", port("8080"), state(catalog.StatePaused)),
	})
	want := map[string]string{
		"ok":        "routable",
		"sick":      "unhealthy",
		"badport":   `caddy.port "abc" is not a port`,
		"ambiguous": "on networks front and back, none chosen",
		"noport":    "no port: publishes none and the route sets none",
		"several":   "no port: publishes several (80, 443) and the route sets none",
		"probing":   "not ready: port 8080 refuses",
		"asleep":    "on standby",
		"paused":    "paused",
	}
	got := verdicts(c)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: verdict %q, want %q", name, got[name], w)
		}
	}
	// A route's port gives a port to those that name none.
	c.AddRoutePort(8080)
	if v := verdicts(c)["noport"]; v != "routable" {
		t.Errorf("with a route on port 8080: noport's verdict %q, want routable", v)
	}
	n := c.Counts()
	if n.ByState["running"] != 7 || n.ByState["standby"] != 1 || n.ByState["paused"] != 1 {
		t.Errorf("counts by state %v", n.ByState)
	}
	if n.Routable != 3 { // ok, and noport and several on port 8080
		t.Errorf("%d routable, want 3 (ok, noport, several)", n.Routable)
	}
}

// TestInstances_selector_and_copies: the selector filters, and what is
// returned is a copy the caller may change.
func TestInstances_selector_and_copies(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Replace([]catalog.Instance{inst("a", label("app", "web")), inst("b", label("app", "api"))})
	list := c.Instances(func(l map[string]string) bool { return l["app"] == "web" })
	if len(list) != 1 || list[0].Name != "a" {
		t.Fatalf("selector app=web: %+v", list)
	}
	list[0].Labels["app"] = "changed"
	if again := c.Instances(nil); again[0].Labels["app"] != "web" {
		t.Error("changing a returned label changed the catalog")
	}
}

// TestExplain says, for each candidate of a route, why requests go there or
// not (R2, R5).
func TestExplain(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Replace([]catalog.Instance{
		inst("web-1", label("app", "web"), port("8080")),
		inst("web-2", label("app", "web"), port("8080"), host("other.example.com")),
		inst("web-3", label("app", "web"), port("8080"), health(catalog.HealthUnhealthy)),
	})
	got := map[string]catalog.Candidate{}
	for _, cd := range c.Snapshot().Explain(catalog.Route{View: v}, "shop.example.com") {
		got[cd.Instance] = cd
	}
	if cd := got["web-1"]; !cd.Target || cd.Why != "routable" || cd.Dial != "10.0.0.2:8080" {
		t.Errorf("web-1: %+v, want a routable target", cd)
	}
	if cd := got["web-2"]; cd.Target || cd.Why != "caddy.host lists only other hosts: other.example.com" {
		t.Errorf("web-2: %+v, want excluded by its caddy.host", cd)
	}
	if cd := got["web-3"]; cd.Target || cd.Why != "unhealthy" {
		t.Errorf("web-3: %+v, want unhealthy", cd)
	}

	// R5: nothing routable, one on standby woken.
	c.Replace([]catalog.Instance{inst("web-4", label("app", "web"), standby(), gateway("10.0.0.1"), publish("", 30080, 8080))})
	list := c.Snapshot().Explain(catalog.Route{View: v, Port: 8080}, "x")
	if len(list) != 1 || !list[0].Target || !strings.Contains(list[0].Why, "on standby, woken") {
		t.Errorf("standby fallback: %+v", list)
	}
	ts, pick := c.Snapshot().Pick(nil, catalog.Route{View: v, Port: 8080}, "x", false)
	if len(ts) != 1 || pick != catalog.PickedStandby {
		t.Errorf("Pick of a standby fallback: %+v %v, want one, PickedStandby", ts, pick)
	}
}

// TestLog_says_once_why_an_instance_gets_nothing: what an operator whose
// site answers 503 needs from the log, once, and nothing for instances no
// route or permission could use.
func TestLog_says_once_why_an_instance_gets_nothing(t *testing.T) {
	t.Run("bad_port_warned_not_joined", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web", port("abc")))
		c.Put(inst("web", port("abc")))
		mustEqual(t, "log", describe(logs.TakeAll()), []string{
			"warn instance gets no requests: label caddy.port is not a port number (1-65535) instance=web caddy.port=abc",
		})
	})
	t.Run("no_port_warned_once_joins_with_a_route_port", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web", host("shop.example.com")))
		c.Put(inst("web", host("shop.example.com"), label("x", "y")))
		mustEqual(t, "log", describe(logs.TakeAll()), []string{
			"warn instance gets no requests: no port: publishes none and the route sets none (give it a caddy.port label, or the route a port) instance=web",
		})
		c.AddRoutePort(8080)
		mustEqual(t, "log after a route port", describe(logs.TakeAll()), []string{
			"info instance joins rotation instance=web why=running, on a route's port 8080",
		})
	})
	t.Run("caddy_host_on_selector_route_warned_once", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web", label("app", "web"), port("8080"), host("a.example.com")))
		logs.TakeAll()
		watch(c, "app=web")
		c.Put(inst("web", label("app", "web", "tier", "x"), port("8080"), host("a.example.com")))
		ws := describe(logs.TakeAll())
		mustEqual(t, "log", ws, []string{
			"warn instance has a caddy.host label: on a selector route it gets requests only for the hosts it lists instance=web selector=app=web caddy.host=a.example.com",
		})
	})
	t.Run("unlabelled_at_debug_until_a_route_selects_it", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.AddRoutePort(8080)
		c.Replace([]catalog.Instance{inst("db", label("app", "db"))})
		for _, e := range logs.TakeAll() {
			if e.Level > zapcore.DebugLevel {
				t.Errorf("unlabelled instance logged at %s: %s", e.Level, e.Message)
			}
		}
		watch(c, "app=db")
		mustEqual(t, "log when a route selects it", describe(logs.TakeAll()), []string{
			"info instance joins rotation instance=db why=running, and a route's selector app=db matches it",
		})
	})
	t.Run("unhealthy_from_its_start_logged_once", func(t *testing.T) {
		logger, logs := observed()
		c := catalog.New(catalog.Options{Logger: logger})
		c.Put(inst("web", port("8080"), health(catalog.HealthStarting)))
		c.Put(inst("web", port("8080"), health(catalog.HealthUnhealthy)))
		c.Put(inst("web", port("8080"), health(catalog.HealthUnhealthy)))
		c.Replace([]catalog.Instance{inst("web", port("8080"), health(catalog.HealthUnhealthy))})
		mustEqual(t, "log", describe(logs.TakeAll()), []string{
			"info instance stays out of rotation instance=web why=unhealthy",
		})
	})
}
