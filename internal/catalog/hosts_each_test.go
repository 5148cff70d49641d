package catalog_test

import (
	"slices"
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
