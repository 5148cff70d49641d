// Command caddy is Caddy with the standard modules and caddy-dicer, for
// local development and tests; users build theirs with xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-dicer/caddy-dicer"
)

func main() {
	caddycmd.Main()
}
