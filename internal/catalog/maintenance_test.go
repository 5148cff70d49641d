package catalog_test

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// An instance labelled caddy.maintenance, or matched by a selector switched
// into maintenance, gets no request, and the route says its message; the
// switch off brings it back (R5i).
func TestMaintenance_R5i_label_and_switch(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("a", host("shop.test"), label("app", "shop")))
	c.Put(inst("b", host("blog.test"), label(catalog.LabelMaintenance, " back at <b>5</b> "), addr("10.0.0.3")))
	route := catalog.Route{Port: 80}
	if got := request(c, nil, 80, "blog.test"); got != nil {
		t.Fatalf("blog.test, its only instance in maintenance by label: targets %v, want none", got)
	}
	if msg, ok := c.Snapshot().Maintenance(route, "blog.test"); !ok || msg != "back at <b>5</b>" {
		t.Fatalf("Maintenance(blog.test) = %q, %v; want the label's message trimmed", msg, ok)
	}
	if got := request(c, nil, 80, "shop.test"); len(got) != 1 {
		t.Fatalf("shop.test before the switch: targets %v, want a", got)
	}
	if n, ok := c.SetMaintenance(selector.MustParse("app=shop"), "", true); !ok || n != 1 {
		t.Fatalf("SetMaintenance on: %d changed, %v; want 1, true", n, ok)
	}
	if got := request(c, nil, 80, "shop.test"); got != nil {
		t.Fatalf("shop.test in maintenance by the switch: targets %v, want none", got)
	}
	if msg, ok := c.Snapshot().Maintenance(route, "shop.test"); !ok || msg != catalog.DefaultMaintenanceMessage {
		t.Fatalf("Maintenance(shop.test) = %q, %v; want the default message", msg, ok)
	}
	st := c.Instances(nil)
	for _, s := range st {
		if !strings.Contains(s.Verdict, "in maintenance") {
			t.Errorf("verdict of %s = %q, want it to say in maintenance", s.Name, s.Verdict)
		}
	}
	if sw := c.MaintenanceSwitches(); len(sw) != 1 || sw[0].Selector != "app=shop" {
		t.Fatalf("switches %+v, want app=shop", sw)
	}
	// A re-listing keeps the switch.
	c.Replace([]catalog.Instance{inst("a", host("shop.test"), label("app", "shop"))})
	if got := request(c, nil, 80, "shop.test"); got != nil {
		t.Fatalf("after a re-listing: targets %v, want none", got)
	}
	if n, _ := c.SetMaintenance(selector.MustParse("app=shop"), "", false); n != 1 {
		t.Fatalf("SetMaintenance off: %d changed, want 1", n)
	}
	if got := request(c, nil, 80, "shop.test"); len(got) != 1 {
		t.Fatalf("shop.test after the switch is off: targets %v, want a", got)
	}
	if _, ok := c.Snapshot().Maintenance(route, "shop.test"); ok {
		t.Fatal("Maintenance(shop.test) after the switch is off: still in maintenance")
	}
}

// A message is bounded and never cut inside a character.
func TestMaintenance_R5i_message_bounded(t *testing.T) {
	long := strings.Repeat("é", catalog.MaxMaintenanceMessage)
	got := catalog.MaintenanceMessage(long)
	if len(got) > catalog.MaxMaintenanceMessage || !strings.HasPrefix(long, got) || strings.ToValidUTF8(got, "?") != got {
		t.Fatalf("message of %d bytes cut to %d bytes, valid UTF-8 prefix wanted", len(long), len(got))
	}
}
