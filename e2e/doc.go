// Package e2e is the end-to-end test suite of caddy-dicer: it builds Caddy
// with the plugin through xcaddy, as users do, and runs that binary against
// a Dicer host, sending real HTTP(S) traffic through it.
//
// The tests carry the build tag e2e, so `go test ./...` skips them; run them
// with `make test-e2e`. By default the Dicer host is a simulator (the test
// daemon of internal/dicertest with real instance processes) inside a
// network namespace the suite creates, which needs root. With DICER_ADDRESS
// and DICER_TOKEN set, the suite uses a real Dicer daemon instead. See
// README.md in this directory.
package e2e
