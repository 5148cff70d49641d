// Package dns tests dns_records (R7e) end to end: a Caddy loaded in this
// process with `permission docker` publishing through the
// dns.providers.rfc2136 module to BIND 9 (Debian's named) in a network
// namespace of the test's own, for containers the Docker Engine runs. Run
// by `make test-dns` as root (CADDY_DICER_DNS=1); see docs/dns-records.md.
package dns
