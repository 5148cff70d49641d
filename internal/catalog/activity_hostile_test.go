package catalog

import (
	"net/netip"
	"strings"
	"testing"
)

// hostileIgnore is a caddy.standby_ignore of long ua: items that a
// crafted User-Agent almost matches at every offset.
func hostileIgnore(tb testing.TB) *Ignore {
	items := make([]string, 7) // 7 items of 128 bytes: under MaxIgnoreBytes
	for i := range items {
		items[i] = "ua:" + strings.Repeat("a", MaxIgnoreItemBytes-1) + string(rune('b'+i))
	}
	ig, err := ParseIgnore(strings.Join(items, ","))
	if err != nil {
		tb.Fatal(err)
	}
	return ig
}

// An outsider's User-Agent is matched in any ASCII case, up to
// IgnoreUABytes of it, without allocating: the crafted one that nearly
// matches every item everywhere is no match.
func TestActivity_R5r_user_agent_match_is_linear_and_folds_case(t *testing.T) {
	ig := hostileIgnore(t)
	crafted := strings.Repeat("A", 4096)
	if ig.Match(netip.Addr{}, "/", crafted) {
		t.Fatal("the crafted agent matched")
	}
	hit := "Mozilla " + strings.Repeat("A", MaxIgnoreItemBytes-1) + "C tail"
	if !ig.Match(netip.Addr{}, "/", hit) {
		t.Fatal("an agent holding an item in upper case did not match")
	}
	late := strings.Repeat("x", IgnoreUABytes) + strings.Repeat("a", MaxIgnoreItemBytes-1) + "b"
	if ig.Match(netip.Addr{}, "/", late) {
		t.Fatal("an item past IgnoreUABytes of the agent matched")
	}
	if n := testing.AllocsPerRun(50, func() { ig.Match(netip.Addr{}, "/", crafted) }); n != 0 {
		t.Fatalf("%v allocations a match", n)
	}
}

// BenchmarkStandbyIgnore_R5r_crafted_user_agent is the cost of one
// instance's ua: items against an outsider's crafted User-Agent (run on
// the request path per routable instance with the label).
func BenchmarkStandbyIgnore_R5r_crafted_user_agent(b *testing.B) {
	ig := hostileIgnore(b)
	crafted := strings.Repeat("A", 4096)
	b.ReportAllocs()
	for b.Loop() {
		if ig.Match(netip.Addr{}, "/", crafted) {
			b.Fatal("match")
		}
	}
}
