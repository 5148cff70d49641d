// Package caddydicer provides Caddy modules that route to the instances a
// machine daemon runs, chosen by their labels, following the daemon's
// events so that no Caddyfile change or reload is needed as instances come
// and go. Build Caddy with it:
//
//	xcaddy build --with github.com/caddy-dicer/caddy-dicer
//
// which brings in every module of the plugin (imports.go):
//
//   - the dynamic upstream sources `dynamic dicer`, `dynamic docker`,
//     `dynamic swarm` and `dynamic multi` (http.reverse_proxy.upstreams,
//     upstreams*.go), which answer GetUpstreams from an in-memory catalog
//     the daemon's events keep current;
//   - the on-demand TLS permissions `permission dicer`, `docker`, `swarm`
//     and `daemons` (tls.permission, permission*.go): a certificate only
//     for a host an instance claims, and with dns_records a DNS record
//     for it (permission_dns.go, R7e);
//   - the settings every one of them embeds to name its daemon (DicerDaemon,
//     DockerEngine, SwarmManager, daemon*.go), and the handle on the
//     shared, reference-counted connection to it (daemon_conn.go; the
//     connection itself is internal/connection, its pool package
//     dicerapp);
//   - in packages of their own namespace: the dicer app and the pool of
//     connections (package dicerapp), the admin API admin.api.dicer
//     (package adminapi), the caddy dicer command (package command), the
//     selection policies (package policy), the HTTP handler
//     dicer_path_prefix (package handler), the layer-4 handler (package
//     layer4, brought in by its own import), the pre-obtainer of
//     obtain_on_claim (package obtain), the DNS provider
//     dns.providers.rfc2136 (package dnsprovider/rfc2136).
//
// The user documentation is docs/index.md; the behaviour contract,
// docs/rules.md.
package caddydicer
