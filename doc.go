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
//   - in packages of their own namespace, under modules/: the dicer app
//     and the pool of connections (modules/dicerapp), the admin API
//     admin.api.dicer (modules/diceradmin), the caddy dicer command
//     (modules/dicercmd), the selection policies (modules/lbpolicy), the
//     HTTP handler dicer_path_prefix (modules/pathprefix), the listener
//     wrapper dicer_prewake (modules/prewake), the layer-4 handler
//     (modules/l4dicer, brought in by its own import), the pre-obtainer
//     of obtain_on_claim (modules/preobtain), the DNS provider
//     dns.providers.rfc2136 (modules/rfc2136).
//
// The user documentation is docs/index.md; the behaviour contract,
// docs/rules.md.
package caddydicer
