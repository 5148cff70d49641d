// Package testkit holds the test helpers that the in-process Caddy tests of
// the root package, the end-to-end tests (e2e) and the Swarm end-to-end
// tests (e2e/swarm) share: waiting on a condition with a deadline, sending
// requests to a Caddy (one, a burst, or a steady load) and reading its
// answers, reading Caddy's log, and following containers on the Docker
// Engine (their events, state, health and addresses).
//
// It is imported by tests only. Its helpers fail the test they are given
// (t.Fatal) rather than return an error when the test cannot go on.
package testkit
