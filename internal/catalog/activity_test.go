package catalog_test

import (
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R5r: caddy.standby_ignore's items, what each matches, and its bounds.
func TestStandbyIgnore_R5r_parse_and_match(t *testing.T) {
	ig, err := catalog.ParseIgnore(" ua:UptimeRobot , path:/healthz/, cidr:10.1.0.0/16,cidr:2001:db8::1 ")
	if err != nil {
		t.Fatal(err)
	}
	none := netip.Addr{}
	for _, c := range []struct {
		client, path, ua string
		want             bool
	}{
		{"", "/", "Mozilla/5.0 (compatible; UPTIMEROBOT/2.0)", true},
		{"", "/", "curl/8.5", false},
		{"", "/healthz", "curl", true},
		{"", "/healthz/db", "curl", true},
		{"", "/healthzz", "curl", false},
		{"", "/api/healthz", "curl", false},
		{"10.1.200.3", "/", "curl", true},
		{"::ffff:10.1.0.9", "/", "curl", true},
		{"10.2.0.1", "/", "curl", false},
		{"2001:db8::1", "/", "curl", true},
		{"2001:db8::2", "/", "curl", false},
	} {
		client := none
		if c.client != "" {
			client = netip.MustParseAddr(c.client)
		}
		if got := ig.Match(client, c.path, c.ua); got != c.want {
			t.Errorf("client %q path %q ua %q: %v, want %v", c.client, c.path, c.ua, got, c.want)
		}
	}
	// The User-Agent is looked at in its first 512 bytes only.
	if ig.Match(none, "/", strings.Repeat("x", catalog.IgnoreUABytes)+"UptimeRobot") {
		t.Error("matched past the first 512 bytes of the User-Agent")
	}
	var nilIgnore *catalog.Ignore
	if nilIgnore.Match(none, "/", "UptimeRobot") || nilIgnore.NeedsClient() {
		t.Error("no label matched")
	}
	if root, _ := catalog.ParseIgnore("path:/"); !root.Match(none, "/anything", "") {
		t.Error("path:/ does not match every path")
	}
	for _, bad := range []string{
		"", "UptimeRobot", "ua:", "host:x", "path:healthz", "cidr:10.0.0.0/33", "cidr:nonsense",
		"ua:" + strings.Repeat("a", catalog.MaxIgnoreItemBytes+1),
		strings.Repeat("ua:a,", catalog.MaxIgnoreItems) + "ua:b",
		"ua:" + strings.Repeat("a,ua:", 300),
	} {
		if _, err := catalog.ParseIgnore(bad); err == nil {
			t.Errorf("%.60q parsed", bad)
		}
	}
}

// R5r: caddy.standby_cpu is a percent of one core above 0 (1024 cores at
// most), with an optional %; a bad value (or one without standby_after)
// counts as unset, warned once per value naming the label; a bad
// caddy.standby_ignore likewise, and neither takes the instance out of
// scale to zero.
func TestStandbyCPU_R5r_label(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	c := catalog.New(catalog.Options{Logger: zap.New(core)})
	cpuOf := func(labels ...opt) float64 {
		t.Helper()
		c.Put(inst("a", append([]opt{sleeps("1m")}, labels...)...))
		for _, s := range c.Sleepers(nil) {
			return s.Policy.CPU
		}
		t.Fatal("not a sleeper")
		return 0
	}
	for value, want := range map[string]float64{"50": 50, " 12.5% ": 12.5, "250": 250, "0": 0, "-5": 0, "lots": 0, "NaN": 0, "1e9": 0} {
		if got := cpuOf(label(catalog.LabelStandbyCPU, value)); got != want {
			t.Errorf("caddy.standby_cpu=%q: %v, want %v", value, got, want)
		}
	}
	warned := logs.FilterMessageSnippet("label caddy.standby_cpu is not valid").Len()
	if warned != 5 {
		t.Errorf("%d warnings naming caddy.standby_cpu, want 5 (one per bad value)", warned)
	}
	c.Put(inst("a", sleeps("1m"), label(catalog.LabelStandbyCPU, "much")))
	warned = logs.FilterMessageSnippet("label caddy.standby_cpu is not valid").Len()
	c.Put(inst("a", sleeps("1m"), label(catalog.LabelStandbyCPU, "much"), addr("10.0.0.9")))
	if n := logs.FilterMessageSnippet("label caddy.standby_cpu is not valid").Len(); n != warned {
		t.Error("the same bad value warned again")
	}
	c.Put(inst("b", sleeps("1m"), label(catalog.LabelStandbyIgnore, "uptime")))
	if n := logs.FilterMessageSnippet("label caddy.standby_ignore is not valid").Len(); n != 1 {
		t.Errorf("%d warnings naming caddy.standby_ignore, want 1", n)
	}
	if len(c.Sleepers(nil)) != 2 {
		t.Error("a bad caddy.standby_cpu or caddy.standby_ignore took an instance out of scale to zero")
	}
	c.Put(inst("d", label(catalog.LabelStandbyCPU, "50")))
	for _, s := range c.Sleepers(nil) {
		if s.ID == "d" {
			t.Error("caddy.standby_cpu without standby_after made a sleeper")
		}
	}
}
