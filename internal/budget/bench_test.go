package budget

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCharge is a new name charged to a ledger holding 10 or 10,000
// names (the names that left the window make room, so that it stays at
// that size), and BenchmarkRefuse one refused by the names budget.
func BenchmarkCharge(b *testing.B) {
	for _, held := range []int{10, MaxNames} {
		b.Run(fmt.Sprint("names=", held), func(b *testing.B) {
			start := time.Unix(1_000_000, 0)
			l := New()
			defer l.Close()
			names := make([]string, held)
			for i := range names {
				names[i] = fmt.Sprintf("n%d.example.com", i)
			}
			// held names spread over the window: each charge finds the
			// oldest left it, and takes its place.
			gap := Window / time.Duration(held)
			for i, n := range names {
				l.Charge(n, fmt.Sprint("i", i%50), Limits{}, start.Add(time.Duration(i)*gap))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := held + i
				l.Charge(names[k%held], fmt.Sprint("i", k%50), Limits{}, start.Add(time.Duration(k)*gap))
			}
		})
	}
}

func BenchmarkRefuse(b *testing.B) {
	for _, held := range []int{10, MaxNames} {
		b.Run(fmt.Sprint("names=", held), func(b *testing.B) {
			now := time.Unix(1_000_000, 0)
			l := New()
			defer l.Close()
			lim := Limits{PerDomain: held}
			if held == MaxNames {
				lim = Limits{} // refused by "names"
			}
			for i := range held {
				l.Charge(fmt.Sprintf("n%d.example.com", i), fmt.Sprint("i", i%50), lim, now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if l.Charge("one-more.example.com", "i0", lim, now).Budget == "" {
					b.Fatal("allowed")
				}
			}
		})
	}
}
