package budget

import (
	"fmt"
	"testing"
	"time"
)

// R7d: a registered domain's budget counts its names whatever the
// instance, public-suffix aware; an instance's counts its names whatever
// the domain; a name charged once is free again within the window; the
// window slides.
func TestLedger_R7d_budgets(t *testing.T) {
	l := New()
	now := time.Unix(1_000_000, 0)
	lim := Limits{PerDomain: 3, PerInstance: 2}
	steps := []struct {
		name, instance, want string
	}{
		{"a.example.co.uk", "t1", ""},
		{"b.example.co.uk", "t1", ""},
		{"c.example.co.uk", "t1", Instance}, // t1 spent its 2
		{"a.example.co.uk", "t1", ""},       // charged already: free
		{"c.example.co.uk", "t2", ""},       // example.co.uk's third
		{"d.example.co.uk", "t3", Domain},   // example.co.uk spent its 3
		{"d.other.co.uk", "t3", ""},         // another registered domain
	}
	for _, s := range steps {
		if got := l.Charge(s.name, s.instance, lim, now).Budget; got != s.want {
			t.Fatalf("Charge(%s, %s) = %q, want %q", s.name, s.instance, got, s.want)
		}
	}
	if r := l.Charge("f.example.co.uk", "t4", lim, now); r.Budget != Domain || r.Key != "example.co.uk" || r.First {
		t.Fatalf("a second refusal of example.co.uk: %+v, want Domain, not the first", r)
	}
	later := now.Add(Window)
	if got := l.Charge("d.example.co.uk", "t1", lim, later).Budget; got != "" {
		t.Fatalf("an hour later: refused by %q", got)
	}
	if got := l.Charge("e.example.co.uk", "t9", Limits{}, now).Budget; got != "" {
		t.Fatalf("no limits: refused by %q", got)
	}
}

// R7d: with no limits, the ledger still remembers at most MaxNames names:
// one more is refused by the "names" budget until the window frees some.
func TestLedger_R7d_bounded(t *testing.T) {
	l := New()
	now := time.Unix(1_000_000, 0)
	for i := range MaxNames {
		if got := l.Charge(fmt.Sprintf("n%d.example.com", i), fmt.Sprint("i", i%50), Limits{}, now).Budget; got != "" {
			t.Fatalf("name %d refused by %q", i, got)
		}
	}
	if got := l.Charge("one-more.example.com", "i0", Limits{}, now).Budget; got != Names {
		t.Fatalf("name %d: %q, want refused by %q", MaxNames+1, got, Names)
	}
	if got := l.Charge("one-more.example.com", "i0", Limits{}, now.Add(Window)).Budget; got != "" {
		t.Fatalf("after the window: refused by %q", got)
	}
	if len(l.names) != 1 || l.Charged("n0.example.com") || !l.Charged("one-more.example.com") {
		t.Errorf("%d names remembered after the window (want 1); n0 charged %v (want false), one-more %v (want true)",
			len(l.names), l.Charged("n0.example.com"), l.Charged("one-more.example.com"))
	}
	l.Close()
}

func TestRegisteredDomain(t *testing.T) {
	for in, want := range map[string]string{
		"a.b.example.com": "example.com", "shop.example.co.uk": "example.co.uk",
		"localhost": "localhost", "x.github.io": "x.github.io", "co.uk": "co.uk",
	} {
		if got := RegisteredDomain(in); got != want {
			t.Errorf("RegisteredDomain(%q) = %q, want %q", in, got, want)
		}
	}
}

// filled is a ledger holding n names charged at now, by 50 instances.
func filled(n int, now time.Time) *Ledger {
	l := New()
	for i := range n {
		l.Charge(fmt.Sprintf("n%d.example.com", i), fmt.Sprint("i", i%50), Limits{}, now)
	}
	return l
}

// R7d: a charge and a refusal cost constant work, whatever the ledger
// holds: at 10,000 names a charge allocates no more than at 10 (no copy
// of every name), and a refusal allocates at most once (the name's
// registered domain, publicsuffix's).
func TestLedger_R7d_constant_work_per_charge_and_refusal(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	perCharge := func(held int) float64 {
		l := filled(held, now)
		defer l.Close()
		names := make([]string, 101)
		for i := range names {
			names[i] = fmt.Sprintf("new%d.example.net", i)
		}
		i := 0
		return testing.AllocsPerRun(100, func() {
			l.Charge(names[i], "i1", Limits{}, now)
			i++
		})
	}
	small, large := perCharge(10), perCharge(MaxNames-200)
	if large > small+1 || large > 4 {
		t.Errorf("a charge allocates %.1f times at 10 names and %.1f at %d, want the same few", small, large, MaxNames-200)
	}
	l := filled(MaxNames, now)
	defer l.Close()
	l.Charge("one-more.example.com", "i0", Limits{}, now)
	if a := testing.AllocsPerRun(100, func() {
		if r := l.Charge("one-more.example.com", "i0", Limits{}, now); r.Budget != Names {
			t.Fatalf("refused by %q, want %q", r.Budget, Names)
		}
	}); a > 1 {
		t.Errorf("a refusal at %d names allocates %.1f times, want at most 1", MaxNames, a)
	}
}
