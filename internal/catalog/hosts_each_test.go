package catalog_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func TestEachHost_R7b_lists_exact_hosts_only(t *testing.T) {
	c := catalog.New(catalog.Options{})
	c.Put(inst("shop", host("Shop.Example.com, www.shop.example.com")))
	c.Put(inst("wild", host("*.example.net")))
	c.Put(inst("gone", host("gone.example.com")))
	c.Delete("id-gone")
	var got []string
	c.Snapshot().EachHost(func(h string) bool { got = append(got, h); return true })
	slices.Sort(got)
	if want := []string{"shop.example.com", "www.shop.example.com"}; !slices.Equal(got, want) {
		t.Fatalf("EachHost = %q, want %q (exact hosts, no wildcard, none deleted)", got, want)
	}
	n := 0
	c.Snapshot().EachHost(func(string) bool { n++; return false })
	if n != 1 {
		t.Errorf("EachHost went on after fn returned false: %d calls", n)
	}
}

// RoutedHosts reads caddy.host as the routes do (R2, R2a, R2c): the
// heal groups (R1e) are built from it.
func TestRoutedHosts_R1e_as_the_routes_read_caddy_host(t *testing.T) {
	var names []string
	for i := range catalog.MaxHostNames + 1 {
		names = append(names, fmt.Sprintf("n%d.example.com", i))
	}
	for _, c := range []struct {
		label  string
		has    bool
		want   []string
		listed bool
	}{
		{"", false, nil, false},
		{" Shop.Example.com. , shop.example.com,*.Example.net,a.*.example.org", true, []string{"shop.example.com", "*.example.net"}, true},
		{strings.Join(names, ","), true, nil, true}, // over the names cap
	} {
		labels := map[string]string{}
		if c.has {
			labels[catalog.LabelHost] = c.label
		}
		got, listed := catalog.RoutedHosts(labels)
		if !slices.Equal(got, c.want) || listed != c.listed {
			t.Errorf("RoutedHosts(%.40q) = %q, %v; want %q, %v", c.label, got, listed, c.want, c.listed)
		}
	}
}
