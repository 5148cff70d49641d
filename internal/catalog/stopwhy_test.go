package catalog_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R6b: the leave of an instance that an event says is stopping says what
// the event told ("exited with code 1", a standby), not "stopping"; later
// descriptions of it while it drains log nothing more.
func TestLeaveSaysWhatTheStopEventTold(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	web := label("app", "web")
	c.Put(inst("web-1", web, port("8080")))
	c.Put(inst("web-2", web, port("8080")))
	logs.TakeAll()
	c.StoppingBecause("id-web-1", "exited with code 1 (crashed or failed)")
	c.Put(inst("web-1", web, port("8080"))) // still running while it dies
	c.Stopping("id-web-2")                  // nothing told
	got := describe(logs.TakeAll())
	want := []string{
		"info instance leaves rotation instance=web-1 why=exited with code 1 (crashed or failed)",
		"info instance leaves rotation instance=web-2 why=stopping",
	}
	if !equal(got, want) {
		t.Errorf("log:\n  got  %q\n  want %q", got, want)
	}
	var _ catalog.StoppingBecause = c
}

// R6b: a known instance whose caddy.host label is removed (a Swarm
// service's --label-rm caddy.host) or changed says so, once.
func TestHostLabelChangesAreLogged(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	c.Put(inst("web", port("8080"), host("shop.example.com")))
	logs.TakeAll()
	c.Put(inst("web", port("8080"), host("shop.example.com, www.example.com")))
	c.Put(inst("web", port("8080")))
	c.Put(inst("web", port("8080")))
	got := describe(logs.TakeAll())
	want := []string{
		"info instance's hosts change: caddy.host label changed instance=web was=shop.example.com caddy.host=shop.example.com, www.example.com",
		"info instance no longer lists hosts: its caddy.host label was removed (it serves any host on a selector route, none on a route by host) instance=web was=shop.example.com, www.example.com",
	}
	if !equal(got, want) {
		t.Errorf("log:\n  got  %q\n  want %q", got, want)
	}
}

// A Group instance (a Swarm service with the endpoint tasks) is shown as a
// group, not as stopped, and counted so.
func TestGroupIsShownAsGroup(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("svc", state(catalog.StateStopped), func(i *catalog.Instance) { i.Group = true }))
	list := c.Instances(nil)
	if len(list) != 1 || list[0].State != "group" || list[0].Routable {
		t.Fatalf("a group: %+v", list)
	}
	if n := c.Counts(); n.ByState["group"] != 1 || n.ByState["stopped"] != 0 {
		t.Errorf("counts %v, want one group and no stopped", n.ByState)
	}
}
