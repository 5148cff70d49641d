package dicercmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// fakeSource is an upstream source module of a backend, for the lists
// below (the real ones register in the root package).
type fakeSource struct{ id string }

func (f fakeSource) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: caddy.ModuleID(f.id), New: func() caddy.Module { return fakeSource{f.id} }}
}
func (fakeSource) FollowsDaemon() {}

func init() {
	caddy.RegisterModule(fakeSource{"http.reverse_proxy.upstreams.zz_cmd_one"})
	caddy.RegisterModule(fakeSource{"http.reverse_proxy.upstreams.zz_cmd_two"})
}

// Every list of backends the command shows (its help, no daemon
// followed, no route for a host) names every registered backend.
func TestCommand_lists_every_backend(t *testing.T) {
	var cmd cobra.Command
	dicerCommand(&cmd)
	var daemons, explain bytes.Buffer
	if err := printDaemons(&daemons, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := printExplanation(&explain, diceradmin.Explanation{Host: "a.example"}); err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"help": cmd.Short, "daemons, none": daemons.String(), "explain, no route": explain.String()} {
		for _, kind := range []string{"zz_cmd_one", "zz_cmd_two"} {
			if !strings.Contains(text, kind) {
				t.Errorf("%s: %q does not list the backend %s", where, text, kind)
			}
		}
	}
}
