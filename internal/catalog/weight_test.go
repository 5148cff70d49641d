package catalog_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// weights is what a route's targets carry: "name weight identity".
func weights(c *catalog.Catalog, v *catalog.View) []string {
	var out []string
	for _, t := range c.Snapshot().Targets(nil, catalog.Route{View: v, Port: 8080}, "any.example") {
		out = append(out, t.Instance+" "+strconv.Itoa(t.Weight)+" "+t.Identity)
	}
	return out
}

func TestWeight_R4c_label(t *testing.T) {
	for _, tc := range []struct {
		label string
		want  int
		warns bool
	}{
		{"", 1, true}, {"0", 0, false}, {"1", 1, false}, {" 90 ", 90, false}, {"10000", 10000, false},
		{"10001", 1, true}, {"-1", 1, true}, {"1.5", 1, true}, {"ten", 1, true}, {"99999999999999999999", 1, true},
	} {
		t.Run("weight_"+tc.label, func(t *testing.T) {
			logger, logs := observed()
			c := catalog.New(catalog.Options{Logger: logger})
			v := watch(c, "app=web")
			for range 3 { // one warning, not one per update
				c.Put(inst("web-1", port("8080"), label("app", "web", catalog.LabelWeight, tc.label)))
			}
			mustEqual(t, "targets", weights(c, v), []string{"web-1 " + strconv.Itoa(tc.want) + " web-1"})
			ws := warnings(logs)
			if !tc.warns {
				if len(ws) != 0 {
					t.Fatalf("warnings %q, want none", describe(ws))
				}
				return
			}
			if len(ws) != 1 || !names(ws[0], "web-1") || !strings.Contains(ws[0].Message, "caddy.weight") {
				t.Fatalf("warnings %q, want one naming web-1 and caddy.weight", describe(ws))
			}
		})
	}
	t.Run("no_label_weighs_1", func(t *testing.T) {
		c := catalog.New(catalog.Options{})
		v := watch(c, "app=web")
		c.Put(inst("web-1", port("8080"), label("app", "web")))
		mustEqual(t, "targets", weights(c, v), []string{"web-1 1 web-1"})
	})
}

func TestWeight_R4c_runtime(t *testing.T) {
	c := catalog.New(catalog.Options{})
	v := watch(c, "app=web")
	c.Put(inst("web-1", port("8080"), label("app", "web", catalog.LabelWeight, "5")))
	c.Put(inst("web-2", port("8080"), label("app", "web"), addr("10.0.0.3")))
	byName := func(name string) func(map[string]string, string) bool {
		return func(_ map[string]string, n string) bool { return n == name }
	}

	got := c.SetWeight(byName("web-1"), 0)
	if len(got) != 1 || got[0].Name != "web-1" || got[0].Weight != 0 || !got[0].Runtime {
		t.Fatalf("SetWeight = %+v, want web-1 at runtime weight 0", got)
	}
	mustEqual(t, "after SetWeight", weights(c, v), []string{"web-1 0 web-1", "web-2 1 web-2"})

	// The daemon describing the instance again keeps it, a listing too.
	c.Put(inst("web-1", port("8080"), label("app", "web", catalog.LabelWeight, "7")))
	c.Replace([]catalog.Instance{inst("web-1", port("8080"), label("app", "web", catalog.LabelWeight, "7")), inst("web-2", port("8080"), label("app", "web"), addr("10.0.0.3"))})
	mustEqual(t, "after Put and Replace", weights(c, v), []string{"web-1 0 web-1", "web-2 1 web-2"})
	st := c.Instances(nil)
	if st[0].Weight != 0 || !st[0].RuntimeWeight || st[1].Weight != 1 || st[1].RuntimeWeight {
		t.Errorf("Instances: %+v", st)
	}

	// Cleared: the label counts again.
	c.SetWeight(byName("web-1"), -1)
	mustEqual(t, "cleared", weights(c, v), []string{"web-1 7 web-1", "web-2 1 web-2"})

	// Gone: a new instance under the same name (new ID) has none.
	c.SetWeight(byName("web-1"), 3)
	c.Delete("id-web-1")
	c.Put(inst("web-1", id("id-web-1b"), port("8080"), label("app", "web")))
	mustEqual(t, "recreated", weights(c, v), []string{"web-1 1 web-1", "web-2 1 web-2"})

	// Nothing matches: nothing set, nothing kept.
	if got := c.SetWeight(byName("nobody"), 4); len(got) != 0 {
		t.Errorf("SetWeight(nobody) = %+v, want none", got)
	}
	if got := c.SetWeight(byName("web-2"), catalog.MaxWeight+5); got[0].Weight != catalog.MaxWeight {
		t.Errorf("SetWeight over the cap = %+v, want %d", got, catalog.MaxWeight)
	}
}

func TestWeight_R4d_identity(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	v := watch(c, "app=web")
	c.Put(inst("web-1", port("8080"), label("app", "web", catalog.LabelSessionKey, "cart-a")))
	c.Put(inst("web-2", port("8080"), label("app", "web"), addr("10.0.0.3"), func(i *catalog.Instance) { i.Identity = "web.2" }))
	c.Put(inst("web-3", port("8080"), label("app", "web", catalog.LabelSessionKey, strings.Repeat("k", catalog.MaxSessionKeyBytes+1)), addr("10.0.0.4")))
	c.Put(inst("web-4", port("8080"), label("app", "web"), addr("10.0.0.5")))
	mustEqual(t, "identities", weights(c, v), []string{"web-1 1 key:cart-a", "web-2 1 web.2", "web-3 1 web-3", "web-4 1 web-4"})
	ws := warnings(logs)
	if len(ws) != 1 || !names(ws[0], "web-3") || !strings.Contains(ws[0].Message, "caddy.session_key") {
		t.Fatalf("warnings %q, want one naming web-3 and caddy.session_key", describe(ws))
	}
}
