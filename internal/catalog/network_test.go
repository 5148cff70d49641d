package catalog_test

import (
	"slices"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// networks attaches the instance to several networks.
func networks(atts ...catalog.Attachment) opt {
	return func(i *catalog.Instance) { i.Networks = atts }
}

var (
	front = catalog.Attachment{Network: "front", Address: "172.18.0.5", Gateway: "172.18.0.1"}
	back  = catalog.Attachment{Network: "back", Address: "172.19.0.5", Gateway: "172.19.0.1"}
)

func TestTargets_R11_network_rule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		instance catalog.Instance
		network  string // the route's network setting
		want     []string
	}{
		{"R11_only_network_used", inst("web", label("app", "web"), networks(back)), "", []string{"web 172.19.0.5:8080"}},
		{"R11_route_network_wins", inst("web", label("app", "web", "caddy.network", "back"), networks(front, back)), "front", []string{"web 172.18.0.5:8080"}},
		{"R11_label_network_without_route_setting", inst("web", label("app", "web", "caddy.network", "back"), networks(front, back)), "", []string{"web 172.19.0.5:8080"}},
		{"R11_ambiguous_gets_no_requests", inst("web", label("app", "web"), networks(front, back)), "", nil},
		{"R11_route_network_instance_is_not_on", inst("web", label("app", "web"), networks(back)), "front", nil},
		{"R11_label_network_instance_is_not_on", inst("web", label("app", "web", "caddy.network", "gone"), networks(front, back)), "", nil},
		{"R11_gateway_of_the_chosen_network", inst("web", label("app", "web"), networks(front, back), publish("", 32768, 8080)), "back", []string{"web 172.19.0.1:32768"}},
		{"R11_no_network_no_requests", inst("web", label("app", "web"), networks()), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := catalog.New(catalog.Options{})
			v := watch(c, "app=web")
			c.Put(tc.instance)
			got := targets(c.Snapshot().Targets(nil, catalog.Route{View: v, Port: 8080, Network: tc.network}, "x"))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCatalog_R11_ambiguous_network_warned_once(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	watch(c, "app=web") // a route that could use it: others are not warned about
	amb := inst("web", label("app", "web"), networks(front, back))
	c.Put(amb)
	c.Put(amb)
	c.Replace([]catalog.Instance{amb})
	warned := logs.FilterMessageSnippet("several networks").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings for one ambiguous instance, want 1", len(warned))
	}
	if f := warned[0].ContextMap(); f["instance"] != "web" {
		t.Errorf("warning fields %v do not name the instance", f)
	}
	c.Put(inst("web", label("app", "web", "caddy.network", "front"), networks(front, back)))
	c.Put(amb)
	if n := len(logs.FilterMessageSnippet("several networks").All()); n != 2 {
		t.Errorf("becoming ambiguous again: %d warnings in all, want 2", n)
	}
}
