package caddydicer

// The modules of this plugin that live in a package of their own Caddy
// namespace, brought in by `xcaddy build --with
// github.com/caddy-dicer/caddy-dicer` as Caddy's modules/standard brings
// in its own.
import (
	// admin.api: admin.api.dicer (also imported for its registry of
	// backends).
	_ "github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
	// http.handlers: dicer_path_prefix.
	_ "github.com/caddy-dicer/caddy-dicer/modules/pathprefix"
	// caddy dicer: the command and its dashboard.
	_ "github.com/caddy-dicer/caddy-dicer/modules/dicercmd"
	// dns.providers: rfc2136 (R7e's dns_records, and ACME's DNS challenge).
	_ "github.com/caddy-dicer/caddy-dicer/modules/rfc2136"
	// caddy.listeners: dicer_prewake (R5n).
	_ "github.com/caddy-dicer/caddy-dicer/modules/prewake"
	// http.reverse_proxy.selection_policies: dicer_weighted, dicer_sticky.
	_ "github.com/caddy-dicer/caddy-dicer/modules/lbpolicy"
)
