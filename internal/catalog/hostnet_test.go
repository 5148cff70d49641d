package catalog_test

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// on puts the instance on the given networks instead of net0.
func on(nets ...catalog.Attachment) opt {
	return func(i *catalog.Instance) { i.Networks = nets }
}

// R11, R11h: an instance with no address to route to is warned about once,
// naming it and why: a caddy.network label naming a network it is not on,
// network none, another container's network stack, the host's network with
// no host address known.
func TestUnroutableNetworksAreWarnedOnce(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	web := label("app", "web")
	c.Put(inst("typo", web, port("8080"), label(catalog.LabelNetwork, "fronted"), on(catalog.Attachment{Network: "frontend", Address: "10.0.0.3"})))
	c.Put(inst("typo", web, port("8080"), label(catalog.LabelNetwork, "fronted"), on(catalog.Attachment{Network: "frontend", Address: "10.0.0.3"})))
	c.Put(inst("isolated", web, port("8080"), on(catalog.Attachment{Network: "none"})))
	c.Put(inst("sidecar", web, port("8080"), on(catalog.Attachment{Network: "container:0123456789ab"})))
	c.Put(inst("hostnet", web, port("8080"), on(catalog.Attachment{Network: "host", Host: true})))
	c.Put(inst("hostnet", web, port("8080"), on(catalog.Attachment{Network: "host", Host: true})))
	want := map[string]string{
		"typo":     "not on network fronted (its caddy.network label): it is on frontend",
		"isolated": "on network none: it has no networking",
		"sidecar":  "shares the network of container:0123456789ab: route to that container instead",
		"hostnet":  "on the host's network, and no host address is known to reach it at",
	}
	seen := map[string]int{}
	for _, e := range logs.FilterMessageSnippet("instance gets no requests").All() {
		name := e.ContextMap()["instance"].(string)
		seen[name]++
		if w, ok := want[name]; !ok || !strings.Contains(e.Message, w) {
			t.Errorf("warning for %s: %q, want it to say %q", name, e.Message, w)
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%d warnings for %s, want 1", seen[name], name)
		}
	}
}

// R11h: a container on the host's network is routed to at the host address
// R4 uses for published ports (published_port_host), on caddy.port.
func TestHostNetworkRoutesToTheHostAddress(t *testing.T) {
	c := catalog.New(catalog.Options{PublishedPortHost: "192.0.2.10"})
	v := watch(c, "app=web")
	c.Put(inst("hostnet", label("app", "web"), port("8081"), on(catalog.Attachment{Network: "host", Host: true})))
	if got := request(c, v, 0, "x"); !equal(got, []string{"hostnet 192.0.2.10:8081"}) {
		t.Errorf("targets %v, want hostnet at 192.0.2.10:8081", got)
	}
}
