package catalog_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R1d: a new instance at an address (or published port) another one had
// is dialled under another spelling of it, so that Caddy's passive health
// state of the old one (kept by dial address) is not the new one's;
// instances at one place at the same time share it as before.
func TestNewInstanceAtAnOldAddressIsSpeltApart(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	web := label("app", "web")
	dial := func() string {
		t.Helper()
		got := request(c, v, 8080, "shop.example.com")
		if len(got) != 1 {
			t.Fatalf("targets %v, want one", got)
		}
		return got[0]
	}

	c.Put(inst("old", web))
	if got := dial(); got != "old 10.0.0.2:8080" {
		t.Fatalf("the first instance at an address: %s, want its plain spelling", got)
	}
	c.Put(inst("old", web, state(catalog.StateStopped), addr("")))
	c.Delete("id-old")
	c.Put(inst("new", web))
	got := dial()
	if got == "new 10.0.0.2:8080" {
		t.Fatalf("a new instance at the old one's address is dialled as the old one was: %s", got)
	}
	if u := unspelt([]string{got}); u[0] != "new 10.0.0.2:8080" {
		t.Fatalf("dialled %s, which is not 10.0.0.2:8080", got)
	}
	c.Put(inst("new", web)) // the same instance again: the same spelling
	if again := dial(); again != got {
		t.Fatalf("the same instance changed spelling with no change: %s, then %s", got, again)
	}

	// Two at one place at once (the same published port, say) share it.
	c2 := catalog.New(catalog.Options{})
	v2 := watch(c2, "app=web")
	c2.Put(inst("a", web, addr("10.0.0.5"), publish("", 32768, 8080), gateway("172.17.0.1")))
	c2.Put(inst("b", web, addr("10.0.0.6"), publish("", 32768, 8080), gateway("172.17.0.1")))
	if got := request(c2, v2, 8080, "x"); !equal(got, []string{"a 172.17.0.1:32768", "b 172.17.0.1:32768"}) {
		t.Fatalf("two instances at one place at once: %v", got)
	}
	// A new container on a published port an old one had.
	c2.Delete("id-a")
	c2.Delete("id-b")
	c2.Put(inst("c", web, addr("10.0.0.7"), publish("", 32768, 8080), gateway("172.17.0.1")))
	if got := request(c2, v2, 8080, "x"); len(got) != 1 || got[0] == "c 172.17.0.1:32768" {
		t.Fatalf("a new instance on an old one's published port: %v, want another spelling", got)
	}
}
