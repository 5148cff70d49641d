package testkit

import (
	"testing"
	"time"
)

// PollEvery is how often Eventually and Until check their condition.
const PollEvery = 20 * time.Millisecond

// Until checks cond every PollEvery until it holds, and reports whether it
// did before within passed. cond is checked at least once.
func Until(within time.Duration, cond func() bool) bool {
	return UntilEvery(within, PollEvery, cond)
}

// UntilEvery is Until checking every interval: for a condition that is
// costly to check (a call to the Engine), or one to catch soon after it
// holds.
func UntilEvery(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Eventually waits until cond holds, failing t with "not within <within>:
// <what>" if it does not within that time.
//
//	testkit.Eventually(t, 5*time.Second, "the follower sees the daemon gone", func() bool { return d.Followers() == 0 })
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}
