//go:build soak && linux

// Package soak is `make soak`: a month of an ordinary busy operator
// compressed into ten minutes, against three Caddy processes built with
// xcaddy (bin/caddy) that share one storage folder, the repository's test
// daemon (bin/dicer-testd) and, for the scale-to-zero and healing part,
// the real Docker Engine; BIND 9 from Debian in a network namespace takes
// the DNS records. It samples what must stay flat (storage keys and
// bytes, zone records, each Caddy's heap, goroutines and open files,
// storage calls per second) after the first tenth and at the end, prints
// the table, and fails when an end figure grew past 1.2 times its first
// tenth or a function no longer works at the end. See docs/benchmarks.md
// ("The soak"). It needs root; the build tag `soak` keeps it out of
// `go test ./...`.
package soak
