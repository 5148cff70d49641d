// Command v2check loads a compose file as Docker Compose v2 does, with
// compose-go (its loader: schema validation, interpolation,
// normalization), and prints each service's image, labels and networks.
// It exits 1 when the file does not load. This machine has Compose v1 only;
// `make test-compose` runs this so that the quick start's compose.yaml stays
// valid for `docker compose` v2 too.
//
// It is a module of its own, so that compose-go is never a dependency of
// the plugin.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: v2check compose.yaml")
		os.Exit(2)
	}
	opts, err := cli.NewProjectOptions([]string{os.Args[1]}, cli.WithOsEnv, cli.WithName("v2check"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "v2check:", err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "v2check: %s does not load as Compose v2 loads it: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	names := make([]string, 0, len(project.Services))
	for name := range project.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := project.Services[name]
		fmt.Printf("%s: image %s, labels %v, networks %d\n", name, s.Image, s.Labels, len(s.Networks))
	}
}
