// Package acme tests on-demand TLS through a real ACME CA: Pebble and its
// DNS, pebble-challtestsrv (both from Debian's `pebble` package), in a
// network namespace of the test's own, in front of an xcaddy-built Caddy
// with `permission docker` and `permission dicer`. Run by `make test-acme`
// as root (CADDY_DICER_ACME=1); see docs/acme.md.
package acme
