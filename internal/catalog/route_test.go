package catalog_test

import (
	"net"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// targetsCase is one request on one route, against a set of instances.
type targetsCase struct {
	name string
	opts catalog.Options
	// instances are written with Put in this order; an instance whose ID
	// repeats an earlier one updates it (a rename, a state change).
	instances []catalog.Instance
	// sel is the route's selector; "" routes by caddy.host alone (View nil).
	sel string
	// port is the route's port setting; 0 when unset.
	port int
	// host is the request's Host header, as the client sent it.
	host string
	// want is the upstreams, as "instance dial", in order.
	want []string
}

// build is one way of getting instances into a catalog. Each case runs with
// each of them, as each exercises a different code path: the incremental
// Put path with the view watched before or after the instances arrive, and
// the full re-listing of Replace.
var builds = []struct {
	name string
	run  func(c *catalog.Catalog, sel string, instances []catalog.Instance) *catalog.View
}{
	{"put_then_watch", func(c *catalog.Catalog, sel string, instances []catalog.Instance) *catalog.View {
		for _, i := range instances {
			c.Put(i)
		}
		if sel == "" {
			return nil
		}
		return watch(c, sel)
	}},
	{"watch_then_put", func(c *catalog.Catalog, sel string, instances []catalog.Instance) *catalog.View {
		var v *catalog.View
		if sel != "" {
			v = watch(c, sel)
		}
		for _, i := range instances {
			c.Put(i)
		}
		return v
	}},
	{"replace", func(c *catalog.Catalog, sel string, instances []catalog.Instance) *catalog.View {
		var v *catalog.View
		if sel != "" {
			v = watch(c, sel)
		}
		// A listing holds each instance once, as it is now.
		last := map[string]int{}
		for n, i := range instances {
			last[i.ID] = n
		}
		var listing []catalog.Instance
		for n, i := range instances {
			if last[i.ID] == n {
				listing = append(listing, i)
			}
		}
		c.Replace(listing)
		return v
	}},
}

func runTargets(t *testing.T, cases []targetsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range builds {
				c := catalog.New(tc.opts)
				v := b.run(c, tc.sel, tc.instances)
				got := request(c, v, tc.port, tc.host)
				mustEqual(t, b.name, got, tc.want)
				samePick(t, b.name, c.Snapshot(), catalog.Route{View: v, Port: tc.port}, catalog.NormalizeHost(tc.host), got)
				for _, ts := range c.Snapshot().Targets(nil, catalog.Route{View: v, Port: tc.port}, catalog.NormalizeHost(tc.host)) {
					if h, _, err := net.SplitHostPort(ts.Dial); err != nil || h == "localhost" || h == "" {
						t.Errorf("%s: dial %q: want host:port, never localhost (R4)", b.name, ts.Dial)
					}
				}
			}
		})
	}
}

// samePick checks that Pick, alone on its route, picks what Targets does
// (got), and that PickOf says what Pick picked: routable instances when
// one of them is, a fallback when only one instance is returned and none
// is routable, none for none.
func samePick(t *testing.T, what string, snap *catalog.Snapshot, route catalog.Route, host string, got []string) {
	t.Helper()
	picked, kind := snap.Pick(nil, route, host, false)
	mustEqual(t, what+": Pick", targets(picked), got)
	if of := snap.PickOf(route, host, false); of != kind {
		t.Errorf("%s: PickOf %d, Pick %d", what, of, kind)
	}
	if (kind == catalog.PickedNone) != (len(picked) == 0) || kind > catalog.PickedRoutable && len(picked) != 1 {
		t.Errorf("%s: Pick %d with %d targets", what, kind, len(picked))
	}
}

// TestTargets is R1-R5: which instances a request goes to, and where.
func TestTargets(t *testing.T) {
	web := label("app", "web")
	runTargets(t, []targetsCase{
		// R1 Routable.
		{
			name:      "R1_running_with_address_routable",
			instances: []catalog.Instance{inst("web-1", web)},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R1_running_healthy_routable",
			instances: []catalog.Instance{inst("web-1", web, health(catalog.HealthHealthy))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R1_health_starting_no_verdict_not_routable",
			instances: []catalog.Instance{inst("web-1", web, health(catalog.HealthStarting))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_unhealthy_not_routable",
			instances: []catalog.Instance{inst("web-1", web, health(catalog.HealthUnhealthy))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_paused_not_routable",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StatePaused))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_stopped_not_routable",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StateStopped))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_failed_not_routable",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StateFailed))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_standby_not_routable",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StateStandby))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name: "R1_other_states_not_routable",
			instances: []catalog.Instance{
				inst("web-1", web, state(catalog.StateStarting)),
				inst("web-2", web, state(catalog.StateStopping)),
				inst("web-3", web, state(catalog.StateRestarting)),
				inst("web-4", web, state(catalog.StateUnknown)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_no_address_not_routable",
			instances: []catalog.Instance{inst("web-1", web, addr(""))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R1_no_address_not_routable_even_if_published",
			instances: []catalog.Instance{inst("web-1", web, addr(""), publish("192.168.1.10", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name: "R1_only_routable_instances_returned",
			instances: []catalog.Instance{
				inst("web-1", web, addr("10.0.0.1")),
				inst("web-2", web, addr("10.0.0.2"), state(catalog.StatePaused)),
				inst("web-3", web, addr("10.0.0.3"), health(catalog.HealthHealthy)),
				inst("web-4", web, addr("10.0.0.4"), health(catalog.HealthUnhealthy)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.1:8080", "web-3 10.0.0.3:8080"},
		},

		// R2 Which instances serve a request.
		{
			name: "R2_selector_returns_matching_instances",
			instances: []catalog.Instance{
				inst("api-1", label("app", "api"), addr("10.0.0.9")),
				inst("web-1", web, addr("10.0.0.1")),
				inst("web-2", label("app", "web", "tier", "edge"), addr("10.0.0.2")),
				inst("nolabel", addr("10.0.0.8")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.1:8080", "web-2 10.0.0.2:8080"},
		},
		{
			name: "R2_selector_with_several_requirements",
			instances: []catalog.Instance{
				inst("web-1", label("app", "web", "tier", "canary"), addr("10.0.0.1")),
				inst("web-2", label("app", "web", "tier", "edge"), addr("10.0.0.2")),
				inst("web-3", label("app", "web", "internal", ""), addr("10.0.0.3")),
				inst("web-4", web, addr("10.0.0.4")),
			},
			sel: "app=web,tier!=canary,!internal", port: 8080, host: "shop.example.com",
			want: []string{"web-2 10.0.0.2:8080", "web-4 10.0.0.4:8080"},
		},
		{
			name: "R2_host_route_returns_instances_listing_host",
			instances: []catalog.Instance{
				inst("shop-1", host("shop.example.com"), addr("10.0.0.1")),
				inst("blog-1", host("blog.example.com"), addr("10.0.0.3")),
				inst("shop-2", host("www.example.com,shop.example.com"), addr("10.0.0.2")),
			},
			port: 8080, host: "shop.example.com",
			want: []string{"shop-1 10.0.0.1:8080", "shop-2 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_route_ignores_instances_without_host_label",
			instances: []catalog.Instance{inst("web-1", web)},
			port:      8080, host: "shop.example.com",
		},
		{
			name:      "R2_host_route_unknown_host_no_requests",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "other.example.com",
		},
		{
			name:      "R2_host_route_empty_host_no_requests",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "",
		},
		{
			name: "R2_selector_instance_with_host_label_only_for_its_hosts",
			instances: []catalog.Instance{
				inst("web-1", web, host("shop.example.com"), addr("10.0.0.1")),
				inst("web-2", web, addr("10.0.0.2")),
			},
			sel: "app=web", port: 8080, host: "blog.example.com",
			want: []string{"web-2 10.0.0.2:8080"},
		},
		{
			name: "R2_selector_instance_with_host_label_gets_its_hosts",
			instances: []catalog.Instance{
				inst("web-1", web, host("shop.example.com"), addr("10.0.0.1")),
				inst("web-2", web, addr("10.0.0.2")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.1:8080", "web-2 10.0.0.2:8080"},
		},
		{
			name: "R2_selector_does_not_add_unmatched_instance_listing_host",
			instances: []catalog.Instance{
				inst("api-1", label("app", "api"), host("shop.example.com"), addr("10.0.0.9")),
				inst("web-1", web, addr("10.0.0.1")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.1:8080"},
		},
		{
			name: "R2_name_order_created_out_of_order",
			instances: []catalog.Instance{
				inst("web-c", web, addr("10.0.0.3")),
				inst("web-a", web, addr("10.0.0.1")),
				inst("web-d", web, addr("10.0.0.4")),
				inst("web-b", web, addr("10.0.0.2")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-a 10.0.0.1:8080", "web-b 10.0.0.2:8080", "web-c 10.0.0.3:8080", "web-d 10.0.0.4:8080"},
		},
		{
			name: "R2_name_order_host_route",
			instances: []catalog.Instance{
				inst("shop-c", host("shop.example.com"), addr("10.0.0.3")),
				inst("shop-a", host("shop.example.com"), addr("10.0.0.1")),
				inst("shop-b", host("shop.example.com"), addr("10.0.0.2")),
			},
			port: 8080, host: "shop.example.com",
			want: []string{"shop-a 10.0.0.1:8080", "shop-b 10.0.0.2:8080", "shop-c 10.0.0.3:8080"},
		},
		{
			name: "R2_name_order_after_rename",
			instances: []catalog.Instance{
				inst("web-a", web, addr("10.0.0.1")),
				inst("web-b", web, addr("10.0.0.2")),
				inst("web-c", web, addr("10.0.0.3")),
				inst("web-z", id("id-web-a"), web, addr("10.0.0.1")), // web-a renamed web-z
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-b 10.0.0.2:8080", "web-c 10.0.0.3:8080", "web-z 10.0.0.1:8080"},
		},
		{
			name: "R2_name_order_after_rename_host_route",
			instances: []catalog.Instance{
				inst("shop-x", host("shop.example.com"), addr("10.0.0.1")),
				inst("shop-y", host("shop.example.com"), addr("10.0.0.2")),
				inst("shop-a", id("id-shop-y"), host("shop.example.com"), addr("10.0.0.2")), // shop-y renamed shop-a
			},
			port: 8080, host: "shop.example.com",
			want: []string{"shop-a 10.0.0.2:8080", "shop-x 10.0.0.1:8080"},
		},
		{
			name:      "R2_host_matched_case_insensitively",
			instances: []catalog.Instance{inst("shop-1", host("Shop.Example.COM"))},
			port:      8080, host: "sHOP.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_request_port_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "shop.example.com:8443",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_port_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com:443"))},
			port:      8080, host: "shop.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			// R2b: Caddy's site shop.example.com does not match the
			// request host shop.example.com. either, which a catch-all
			// site gets instead: the instance is not served there.
			name:      "R2b_host_request_trailing_dot_not_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "shop.example.com.",
		},
		{
			name:      "R2b_host_request_trailing_dots_not_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "shop.example.com..",
		},
		{
			name:      "R2b_host_request_trailing_dot_and_port_not_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "shop.example.com.:80",
		},
		{
			name:      "R2b_host_request_trailing_dot_listed_with_one_in_label_not_served",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com."))},
			port:      8080, host: "shop.example.com.",
		},
		{
			name:      "R2b_host_request_bracketed_name_as_caddy_reads_it",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "[shop.example.com]:443",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2b_host_request_empty_port",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com"))},
			port:      8080, host: "shop.example.com:",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_trailing_dot_ignored",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com."))},
			port:      8080, host: "shop.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_case_port_and_label_dot_together",
			instances: []catalog.Instance{inst("shop-1", host("SHOP.example.com.:443"))},
			port:      8080, host: "Shop.Example.Com:8443",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_several_hosts_with_spaces_first",
			instances: []catalog.Instance{inst("shop-1", host(" shop.example.com , WWW.Shop.example.com. ,blog.example.com "))},
			port:      8080, host: "shop.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_several_hosts_with_spaces_middle",
			instances: []catalog.Instance{inst("shop-1", host(" shop.example.com , WWW.Shop.example.com. ,blog.example.com "))},
			port:      8080, host: "www.shop.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_several_hosts_with_spaces_last",
			instances: []catalog.Instance{inst("shop-1", host(" shop.example.com , WWW.Shop.example.com. ,blog.example.com "))},
			port:      8080, host: "BLOG.example.com:80",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_several_hosts_selector_route",
			instances: []catalog.Instance{inst("web-1", web, host("shop.example.com, www.shop.example.com"))},
			sel:       "app=web", port: 8080, host: "WWW.shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R2b_host_label_selector_route_trailing_dot_not_ignored",
			instances: []catalog.Instance{inst("web-1", web, host("shop.example.com, www.shop.example.com"))},
			sel:       "app=web", port: 8080, host: "WWW.shop.example.com.",
		},
		{
			name:      "R2_host_listed_twice_one_target",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com, SHOP.example.com."))},
			port:      8080, host: "shop.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_host_label_is_not_a_suffix_match",
			instances: []catalog.Instance{inst("shop-1", host("example.com"))},
			port:      8080, host: "shop.example.com",
		},
		{
			name:      "R2_host_label_changed_old_host_no_longer_served",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com")), inst("shop-1", host("blog.example.com"))},
			port:      8080, host: "shop.example.com",
		},
		{
			name:      "R2_host_label_changed_new_host_served",
			instances: []catalog.Instance{inst("shop-1", host("shop.example.com")), inst("shop-1", host("blog.example.com"))},
			port:      8080, host: "blog.example.com",
			want: []string{"shop-1 10.0.0.2:8080"},
		},
		{
			name:      "R2_labels_changed_instance_leaves_view",
			instances: []catalog.Instance{inst("web-1", web), inst("web-1", label("app", "api"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R2_labels_changed_instance_joins_view",
			instances: []catalog.Instance{inst("web-1", label("app", "api")), inst("web-1", web)},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},

		// R3 Port.
		{
			name:      "R3_caddy_port_overrides_route_port",
			instances: []catalog.Instance{inst("web-1", web, port("9000"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:9000"},
		},
		{
			name:      "R3_caddy_port_overrides_only_published_port",
			instances: []catalog.Instance{inst("web-1", web, port("9000"), publish("127.0.0.1", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:9000"},
		},
		{
			name:      "R3_route_port_without_caddy_port",
			instances: []catalog.Instance{inst("web-1", web)},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R3_route_port_overrides_only_published_port",
			instances: []catalog.Instance{inst("web-1", web, publish("127.0.0.1", 32768, 9000))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name: "R3_only_tcp_published_port_without_port_named",
			// Published on loopback only, so R4 sends requests to the
			// instance's own address at that guest port.
			instances: []catalog.Instance{inst("web-1", web, publish("127.0.0.1", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R3_only_tcp_published_port_goes_to_published_port",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 192.168.122.1:32768"},
		},
		{
			name: "R3_same_guest_port_published_twice_is_one_port",
			instances: []catalog.Instance{inst("web-1", web,
				publish("192.168.1.10", 32768, 8080), publish("fd00::10", 32768, 8080))},
			sel: "app=web", host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32768"},
		},
		{
			name: "R3_several_tcp_ports_no_port_named_no_requests",
			instances: []catalog.Instance{inst("web-1", web,
				publish("192.168.1.10", 32768, 8080), publish("192.168.1.10", 32769, 8443))},
			sel: "app=web", host: "shop.example.com",
		},
		{
			name: "R3_several_tcp_ports_route_port_picks_one",
			instances: []catalog.Instance{inst("web-1", web,
				publish("192.168.1.10", 32768, 8080), publish("192.168.1.10", 32769, 8443))},
			sel: "app=web", port: 8443, host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32769"},
		},
		{
			name:      "R3_no_port_named_nothing_published_no_requests",
			instances: []catalog.Instance{inst("web-1", web)},
			sel:       "app=web", host: "shop.example.com",
		},
		{
			name:      "R3_udp_only_published_port_ignored",
			instances: []catalog.Instance{inst("web-1", web, publishProto("192.168.1.10", 32768, 53, catalog.UDP))},
			sel:       "app=web", host: "shop.example.com",
		},
		{
			name: "R3_udp_port_ignored_next_to_one_tcp_port",
			instances: []catalog.Instance{inst("web-1", web,
				publishProto("192.168.1.10", 32767, 53, catalog.UDP), publish("192.168.1.10", 32768, 8080))},
			sel: "app=web", host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32768"},
		},
		{
			name:      "R3_invalid_caddy_port_0_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port("0"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_70000_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port("70000"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_65536_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port("65536"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_http_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port("http"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_negative_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port("-80"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_empty_no_requests",
			instances: []catalog.Instance{inst("web-1", web, port(""))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R3_invalid_caddy_port_not_replaced_by_only_published_port",
			instances: []catalog.Instance{inst("web-1", web, port("http"), publish("192.168.1.10", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
		},
		{
			name:      "R3_caddy_port_bounds_1",
			instances: []catalog.Instance{inst("web-1", web, port("1"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:1"},
		},
		{
			name:      "R3_caddy_port_bounds_65535",
			instances: []catalog.Instance{inst("web-1", web, port("65535"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:65535"},
		},
		{
			name: "R3_invalid_port_only_affects_its_instance",
			instances: []catalog.Instance{
				inst("web-1", web, port("http"), addr("10.0.0.1")),
				inst("web-2", web, addr("10.0.0.2")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-2 10.0.0.2:8080"},
		},

		// R4 Where requests go.
		{
			name:      "R4_published_on_specific_host_ip",
			opts:      catalog.Options{PublishedPortHost: "ingress.example.net", DaemonHost: "203.0.113.7"},
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("192.168.1.10", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32768"},
		},
		{
			name:      "R4_published_on_specific_ipv6_host_ip_bracketed",
			instances: []catalog.Instance{inst("web-1", web, publish("fd00::10", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 [fd00::10]:32768"},
		},
		{
			name:      "R4_published_on_all_addresses_published_port_host",
			opts:      catalog.Options{PublishedPortHost: "ingress.example.net", DaemonHost: "203.0.113.7"},
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 ingress.example.net:32768"},
		},
		{
			name:      "R4_published_on_all_addresses_daemon_host",
			opts:      catalog.Options{DaemonHost: "203.0.113.7"},
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 203.0.113.7:32768"},
		},
		{
			name:      "R4_published_on_all_addresses_gateway",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.122.1:32768"},
		},
		{
			name:      "R4_published_on_0.0.0.0_is_all_addresses",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("0.0.0.0", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.122.1:32768"},
		},
		{
			name:      "R4_published_on_ipv6_unspecified_is_all_addresses",
			opts:      catalog.Options{PublishedPortHost: "ingress.example.net"},
			instances: []catalog.Instance{inst("web-1", web, publish("::", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 ingress.example.net:32768"},
		},
		{
			name:      "R4_ipv6_gateway_bracketed",
			instances: []catalog.Instance{inst("web-1", web, gateway("fd00::1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 [fd00::1]:32768"},
		},
		{
			name:      "R4_published_only_on_loopback_goes_to_instance_address",
			opts:      catalog.Options{PublishedPortHost: "ingress.example.net"},
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("127.0.0.1", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R4_published_only_on_ipv6_loopback_goes_to_instance_address",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("::1", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name: "R4_loopback_publication_skipped_for_another",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"),
				publish("127.0.0.1", 32768, 8080), publish("", 32769, 8080))},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.122.1:32769"},
		},
		{
			name:      "R4_not_published_goes_to_instance_address",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), addr("10.88.0.5"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.88.0.5:8080"},
		},
		{
			name:      "R4_other_guest_port_published_not_used",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publish("", 32768, 9000))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R4_udp_publication_of_the_port_not_used",
			instances: []catalog.Instance{inst("web-1", web, gateway("192.168.122.1"), publishProto("", 32768, 8080, catalog.UDP))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name:      "R4_caddy_port_selects_published_port",
			instances: []catalog.Instance{inst("web-1", web, port("9000"), publish("192.168.1.10", 32768, 8080), publish("192.168.1.10", 32769, 9000))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32769"},
		},
		{
			name:      "R4_ipv6_instance_address_bracketed",
			instances: []catalog.Instance{inst("web-1", web, addr("fd00::2"))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 [fd00::2]:8080"},
		},
		{
			name: "R4_never_localhost_when_published_host_unknown",
			// Published on every address but no host known to reach it at:
			// the instance's own address, never localhost.
			instances: []catalog.Instance{inst("web-1", web, publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},

		// R5 Scale to zero.
		{
			name:      "R5_woken_instance_awaiting_verdict_is_fallback",
			instances: []catalog.Instance{inst("web-1", web, wake(), health(catalog.HealthStarting))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"},
		},
		{
			name: "R5_awaiting_verdict_preferred_over_standby",
			instances: []catalog.Instance{
				inst("web-a", web, standby(), gateway("192.168.122.1"), publish("", 32768, 8080)),
				inst("web-z", web, wake(), health(catalog.HealthStarting), addr("10.0.0.26")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-z 10.0.0.26:8080"},
		},
		{
			name: "R5_starting_woken_instance_keeps_fallback_no_second_wake",
			instances: []catalog.Instance{
				inst("web-a", web, wake(), state(catalog.StateStarting), publish("192.168.1.10", 32768, 8080)),
				inst("web-b", web, standby(), publish("192.168.1.10", 32769, 8080)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-a 192.168.1.10:32768"},
		},
		{
			name:      "R5_awaiting_verdict_without_wake_not_fallback",
			instances: []catalog.Instance{inst("web-1", web, health(catalog.HealthStarting))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R5_standby_publishing_port_goes_to_published_port",
			instances: []catalog.Instance{inst("web-1", web, standby(), gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.122.1:32768"},
		},
		{
			name:      "R5_standby_without_address_goes_to_published_port",
			instances: []catalog.Instance{inst("web-1", web, standby(), addr(""), publish("192.168.1.10", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32768"},
		},
		{
			name:      "R5_standby_without_wake_none",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StateStandby), gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R5_standby_wake_without_published_port_none",
			instances: []catalog.Instance{inst("web-1", web, standby())},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R5_standby_wake_publishing_another_port_none",
			instances: []catalog.Instance{inst("web-1", web, standby(), gateway("192.168.122.1"), publish("", 32768, 9000))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R5_standby_wake_published_only_on_loopback_none",
			instances: []catalog.Instance{inst("web-1", web, standby(), publish("127.0.0.1", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name:      "R5_paused_wake_not_fallback",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StatePaused), wake(), gateway("192.168.122.1"), publish("", 32768, 8080))},
			sel:       "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name: "R5_several_on_standby_exactly_one_first_by_name",
			instances: []catalog.Instance{
				inst("web-c", web, standby(), publish("192.168.1.10", 32770, 8080)),
				inst("web-a", web, standby(), publish("192.168.1.10", 32768, 8080)),
				inst("web-b", web, standby(), publish("192.168.1.10", 32769, 8080)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-a 192.168.1.10:32768"},
		},
		{
			name: "R5_first_standby_that_publishes_the_port",
			instances: []catalog.Instance{
				inst("web-a", web, standby()),
				inst("web-b", web, state(catalog.StateStandby), publish("192.168.1.10", 32768, 8080)),
				inst("web-c", web, standby(), publish("192.168.1.10", 32769, 8080)),
				inst("web-d", web, standby(), publish("192.168.1.10", 32770, 8080)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-c 192.168.1.10:32769"},
		},
		{
			name: "R5_routable_instance_present_no_fallback",
			instances: []catalog.Instance{
				inst("web-a", web, standby(), publish("192.168.1.10", 32768, 8080)),
				inst("web-b", web, wake(), health(catalog.HealthStarting), addr("10.0.0.3")),
				inst("web-c", web, addr("10.0.0.4")),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
			want: []string{"web-c 10.0.0.4:8080"},
		},
		{
			name: "R5_fallback_respects_host_label_on_selector_route",
			instances: []catalog.Instance{
				inst("web-a", web, host("blog.example.com"), standby(), publish("192.168.1.10", 32768, 8080)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name: "R5_fallback_only_from_the_route_instances",
			instances: []catalog.Instance{
				inst("api-a", label("app", "api"), standby(), publish("192.168.1.10", 32768, 8080)),
				inst("web-b", web, state(catalog.StateStopped)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
		},
		{
			name: "R5_host_route_fallback",
			instances: []catalog.Instance{
				inst("shop-b", host("shop.example.com"), standby(), publish("192.168.1.10", 32769, 8080)),
				inst("shop-a", host("shop.example.com"), state(catalog.StatePaused)),
			},
			port: 8080, host: "Shop.Example.com:443",
			want: []string{"shop-b 192.168.1.10:32769"},
		},
		{
			name: "R5_standby_fallback_uses_only_published_port_without_port_named",
			instances: []catalog.Instance{
				inst("web-a", web, standby(), gateway("192.168.122.1"), publish("", 32768, 8080)),
			},
			sel: "app=web", host: "shop.example.com",
			want: []string{"web-a 192.168.122.1:32768"},
		},
		{
			name: "R5_standby_fallback_invalid_caddy_port_none",
			instances: []catalog.Instance{
				inst("web-a", web, port("http"), standby(), publish("192.168.1.10", 32768, 8080)),
			},
			sel: "app=web", port: 8080, host: "shop.example.com",
		},
	})
}

// TestTargetsAppendsToDst checks Targets appends after what dst holds and
// that reusing a buffer gives the same answer.
func TestTargetsAppendsToDst(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("web-1", label("app", "web"), addr("10.0.0.1")))
	c.Put(inst("web-2", label("app", "web"), addr("10.0.0.2")))
	v := watch(c, "app=web")
	route := catalog.Route{View: v, Port: 8080}

	prefix := []catalog.Target{{Instance: "keep", Dial: "192.0.2.1:1"}}
	got := targets(c.Snapshot().Targets(prefix, route, "shop.example.com"))
	mustEqual(t, "appended", got, []string{"keep 192.0.2.1:1", "web-1 10.0.0.1:8080", "web-2 10.0.0.2:8080"})

	// With a prefix and nothing routable, the fallback is still found: the
	// prefix does not count as a routable instance (R5).
	c.Put(inst("web-1", label("app", "web"), standby(), publish("192.168.1.10", 32768, 8080)))
	c.Put(inst("web-2", label("app", "web"), state(catalog.StateStopped)))
	got = targets(c.Snapshot().Targets(prefix[:1], route, "shop.example.com"))
	mustEqual(t, "fallback after prefix", got, []string{"keep 192.0.2.1:1", "web-1 192.168.1.10:32768"})

	var dst []catalog.Target
	for range 3 {
		dst = c.Snapshot().Targets(dst[:0], route, "shop.example.com")
		mustEqual(t, "reused dst", targets(dst), []string{"web-1 192.168.1.10:32768"})
	}
}

// TestTargetsUnknownView: a view the catalog does not know (released) gives
// no upstreams rather than a panic.
func TestTargetsUnknownView(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("web-1", label("app", "web")))
	v := watch(c, "app=web")
	c.Unwatch(v)
	if got := request(c, v, 8080, "shop.example.com"); got != nil {
		t.Errorf("released view: got %q, want none", got)
	}
}

// TestClaimed is R7: a host is claimed when some instance, in any state,
// lists it in caddy.host.
func TestClaimed(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("shop", host("Shop.Example.com, www.shop.example.com.:443"), state(catalog.StateStopped)))
	c.Put(inst("blog", host("blog.example.com"), state(catalog.StateStandby)))
	c.Put(inst("docs", host("docs.example.com"), state(catalog.StateFailed), addr("")))
	c.Put(inst("api", host("api.example.com"), health(catalog.HealthUnhealthy)))
	c.Put(inst("app", host("app.example.com")))
	c.Put(inst("web", label("app", "web"))) // claims nothing
	c.Put(inst("gone", host("gone.example.com")))
	c.Delete("id-gone")
	c.Put(inst("moved", host("old.example.com")))
	c.Put(inst("moved", host("new.example.com")))

	for _, tc := range []struct {
		name string
		host string
		want bool
	}{
		{"R7_stopped_instance_host_claimed", "shop.example.com", true},
		{"R7_second_host_in_label_claimed", "www.shop.example.com", true},
		{"R7_standby_instance_host_claimed", "blog.example.com", true},
		{"R7_failed_instance_without_address_host_claimed", "docs.example.com", true},
		{"R7_unhealthy_instance_host_claimed", "api.example.com", true},
		{"R7_running_instance_host_claimed", "app.example.com", true},
		{"R7_case_insensitive", "SHOP.EXAMPLE.COM", true},
		{"R7_port_ignored", "shop.example.com:443", true},
		{"R7_R2b_trailing_dot_not_ignored", "shop.example.com.", false},
		{"R7_R2b_case_port_and_dot", "WWW.Shop.Example.Com.:8443", false},
		{"R7_case_and_port", "WWW.Shop.Example.Com:8443", true},
		{"R7_unknown_host_not_claimed", "evil.example.com", false},
		{"R7_parent_domain_not_claimed", "example.com", false},
		{"R7_subdomain_not_claimed", "x.shop.example.com", false},
		{"R7_empty_not_claimed", "", false},
		{"R7_label_value_not_a_host", "web", false},
		{"R7_deleted_instance_host_not_claimed", "gone.example.com", false},
		{"R7_host_removed_from_label_not_claimed", "old.example.com", false},
		{"R7_host_added_to_label_claimed", "new.example.com", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Snapshot().Claimed(catalog.NormalizeHost(tc.host)); got != tc.want {
				t.Errorf("Claimed(NormalizeHost(%q)) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

// TestClaimedSharedHost: a host two instances list stays claimed until the
// last one stops listing it.
func TestClaimedSharedHost(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("shop-1", host("shop.example.com")))
	c.Put(inst("shop-2", host("shop.example.com")))
	if n := c.Snapshot().Hosts(); n != 1 {
		t.Errorf("Hosts() = %d, want 1", n)
	}
	c.Delete("id-shop-1")
	if !c.Snapshot().Claimed("shop.example.com") {
		t.Fatal("host still listed by shop-2: want claimed")
	}
	c.Put(inst("shop-2"))
	if c.Snapshot().Claimed("shop.example.com") {
		t.Error("no instance lists the host any more: want not claimed")
	}
	if n := c.Snapshot().Hosts(); n != 0 {
		t.Errorf("Hosts() = %d, want 0", n)
	}
}

func TestNormalizeHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"shop.example.com", "shop.example.com"},
		{"Shop.Example.COM", "shop.example.com"},
		{"shop.example.com:443", "shop.example.com"},
		{"shop.example.com.", "shop.example.com."},
		{"SHOP.example.com.:8443", "shop.example.com."},
		{"shop.example.com..", "shop.example.com.."},
		{"[shop.example.com]", "shop.example.com"},
		{"[shop.example.com]:443", "shop.example.com"},
		{"shop.example.com:", "shop.example.com"},
		{"a:b:c", "a:b:c"},
		{"[a]b:80", "a]b:80"},
		{"192.0.2.1:80", "192.0.2.1"},
		{"[fd00::1]:443", "fd00::1"},
		{"[FD00::1]", "fd00::1"},
		{"fd00::1", "fd00::1"},
		{"", ""},
	} {
		if got := catalog.NormalizeHost(tc.in); got != tc.want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { catalog.NormalizeHost("shop.example.com") }); n != 0 {
		t.Errorf("NormalizeHost of a normalized name: %v allocs, want 0", n)
	}
}

// TestTargets_R5a_a_freeze_is_told_and_keeps_the_address: each time an
// instance goes on standby or is paused, the catalog tells Options.Froze
// (the proxy then drops the connections kept alive to it) before any
// snapshot shows the freeze, and the instance keeps its plain dial
// address, so Caddy sees one address for it (cookie affinity, passive
// health, {upstream_hostport}). A freeze seen only by a re-listing is told
// too; a change that is no freeze is not.
func TestTargets_R5a_a_freeze_is_told_and_keeps_the_address(t *testing.T) {
	var c *catalog.Catalog
	var v *catalog.View
	var told []string
	c = catalog.New(catalog.Options{Froze: func(id string) {
		// Called before the freeze is published: the snapshot still shows
		// the instance running, never as the standby fallback.
		if p := c.Snapshot().PickOf(catalog.Route{View: v, Port: 8080}, "sleepy.test", false); p != catalog.PickedRoutable {
			t.Errorf("told of the freeze of %s when a snapshot already shows it (pick %v)", id, p)
		}
		told = append(told, id)
	}})
	v = watch(c, "app=sleepy")
	sleepy := func(opts ...opt) catalog.Instance {
		return inst("sleepy", append([]opt{label("app", "sleepy"), wake(), publish("", 32768, 8080), gateway("10.0.0.1")}, opts...)...)
	}
	freezes := 0
	step := func(what string, i catalog.Instance, freeze bool, replace bool) {
		t.Helper()
		if replace {
			c.Replace([]catalog.Instance{i})
		} else {
			c.Put(i)
		}
		if freeze {
			freezes++
		}
		if len(told) != freezes {
			t.Fatalf("%s: told of %d freezes (%q), want %d", what, len(told), told, freezes)
		}
		if got := request(c, v, 8080, "sleepy.test"); !equal(got, []string{"sleepy 10.0.0.1:32768"}) {
			t.Errorf("%s: targets %q, want the plain published port 10.0.0.1:32768", what, got)
		}
	}
	step("first listed", sleepy(), false, true)
	step("on standby", sleepy(standby()), true, false)
	step("still on standby", sleepy(standby()), false, false)
	step("woken, health pending", sleepy(health(catalog.HealthStarting)), false, false)
	step("running", sleepy(), false, false)
	c.Put(sleepy(state(catalog.StatePaused))) // neither routable nor a fallback
	freezes++
	step("unpaused", sleepy(), false, false)
	step("on standby again", sleepy(standby()), true, false)
	step("re-listed, still on standby", sleepy(standby()), false, true)
	step("re-listed running", sleepy(), false, true)
	step("re-listed on standby", sleepy(standby()), true, true)
	if told[0] != "id-sleepy" {
		t.Errorf("told %q, want the instance's ID", told[0])
	}
}

// R5a: an instance seen stopping (a stop event, or Caddy putting it on
// standby) is told once, like a freeze: its idle keep-alive connections
// must not hold up its drain.
func TestTargets_R5a_a_stop_is_told_once(t *testing.T) {
	var told []string
	c := catalog.New(catalog.Options{Froze: func(id string) { told = append(told, id) }})
	watch(c, "app=web")
	c.Put(inst("web", label("app", "web")))
	c.Stopping("id-web")
	c.Stopping("id-web") // a second event of the same stop
	if len(told) != 1 || told[0] != "id-web" {
		t.Fatalf("told %q after two stop events, want id-web once", told)
	}
	c.CancelStopping("id-web")
	c.StoppingBecause("id-web", "idle")
	if len(told) != 2 {
		t.Fatalf("told %q after a stop, its cancel and another stop, want twice", told)
	}
}

// TestPick is what a route picks when it is one of several serving the
// same requests (the sources of one `dynamic multi`): the kind of its
// targets, for R5 to hold across them, and R2a across their catalogs.
func TestPick(t *testing.T) {
	web := label("app", "web")
	cases := []struct {
		name             string
		instances        []catalog.Instance
		sel              string
		host             string
		claimedElsewhere bool
		want             []string
		kind             catalog.Pick
	}{
		{
			name:      "routable",
			instances: []catalog.Instance{inst("web-1", web), inst("web-2", web, standby(), publish("", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"}, kind: catalog.PickedRoutable,
		},
		{
			name:      "R5_woken",
			instances: []catalog.Instance{inst("web-1", web, wake(), health(catalog.HealthStarting))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 10.0.0.2:8080"}, kind: catalog.PickedWoken,
		},
		{
			name:      "R5_standby",
			instances: []catalog.Instance{inst("web-1", web, standby(), publish("192.168.1.10", 32768, 8080))},
			sel:       "app=web", host: "shop.example.com",
			want: []string{"web-1 192.168.1.10:32768"}, kind: catalog.PickedStandby,
		},
		{
			name:      "none",
			instances: []catalog.Instance{inst("web-1", web, state(catalog.StateStopped))},
			sel:       "app=web", host: "shop.example.com",
			kind: catalog.PickedNone,
		},
		{
			name:      "R2a_wildcard_serves_a_host_nobody_lists",
			instances: []catalog.Instance{inst("any", host("*.example.com"))},
			host:      "shop.example.com",
			want:      []string{"any 10.0.0.2:8080"}, kind: catalog.PickedRoutable,
		},
		{
			name:      "R2a_host_listed_in_another_catalog_leaves_wildcards_out",
			instances: []catalog.Instance{inst("any", host("*.example.com"))},
			host:      "shop.example.com", claimedElsewhere: true,
			kind: catalog.PickedNone,
		},
		{
			name:      "R2a_selector_route_too",
			instances: []catalog.Instance{inst("any", web, host("*.example.com"))},
			sel:       "app=web", host: "shop.example.com", claimedElsewhere: true,
			kind: catalog.PickedNone,
		},
		{
			name:      "R2a_listed_here_and_elsewhere_both_serve",
			instances: []catalog.Instance{inst("shop", host("shop.example.com"))},
			host:      "shop.example.com", claimedElsewhere: true,
			want: []string{"shop 10.0.0.2:8080"}, kind: catalog.PickedRoutable,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := catalog.New(catalog.Options{})
			for _, i := range tc.instances {
				c.Put(i)
			}
			route := catalog.Route{Port: 8080}
			if tc.sel != "" {
				route.View = watch(c, tc.sel)
			}
			snap := c.Snapshot()
			got, kind := snap.Pick(nil, route, tc.host, tc.claimedElsewhere)
			mustEqual(t, "targets", targets(got), tc.want)
			if kind != tc.kind {
				t.Errorf("kind %d, want %d", kind, tc.kind)
			}
			if of := snap.PickOf(route, tc.host, tc.claimedElsewhere); of != tc.kind {
				t.Errorf("PickOf %d, want %d", of, tc.kind)
			}
		})
	}
}

// TestListsExactly: a host listed by name, in any state, not through a
// wildcard.
func TestListsExactly(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("shop", host("shop.example.com"), state(catalog.StateStopped)))
	c.Put(inst("any", host("*.example.net")))
	snap := c.Snapshot()
	for h, want := range map[string]bool{"shop.example.com": true, "a.example.net": false, "example.com": false} {
		if got := snap.ListsExactly(h); got != want {
			t.Errorf("ListsExactly(%s) = %v, want %v", h, got, want)
		}
	}
}
