package docs_test

import (
	"fmt"
	"os"
	"testing"

	// Every module of the plugin, registered, for the snippets and the
	// README's modules table.
	_ "github.com/caddy-dicer/caddy-dicer"
	_ "github.com/caddy-dicer/caddy-dicer/modules/l4dicer"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// TestMain runs the checks from the repository's root, where the pages'
// paths start.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
