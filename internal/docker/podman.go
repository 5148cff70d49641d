package docker

import (
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Podman (R11p). `dynamic docker` and `permission docker` follow Podman
// through its Docker-compatible API (`address` its socket): the same
// adapter, with these differences handled where they arise:
//
//   - No "scope" filter is asked for (Podman rejects or ignores it): the
//     event filters are type and event only (eventFilters).
//   - Podman filters events on its own names: a stop is "died" (sent to a
//     Docker client as "die", but an "event=die" filter drops it), and a
//     removal is "remove" (never "destroy"). Both are asked for and read
//     as die and destroy (ContainerEvent); an older Podman's died event
//     carries no labels and no exitCode, and needs neither.
//   - A health check's result comes as a bare "health_status" action with
//     the verdict in the actor attribute health_status, and newer Podmans
//     send one at every check, changed or not: each is one inspection,
//     and one that changes nothing is no catalog write (follow's session
//     puts only what differs).
//   - Podman's /containers/json may leave the health out of a running
//     container's Status ("Up 5 seconds" with a check configured and
//     starting): on Podman such a container is inspected (podmanSummary).
//   - A rootless container's network has no address (IPAddress ""): only
//     its published ports reach it, which the catalog routes to as for any
//     container without an address (R3).

// versionTimeout bounds the version call that tells Podman (R11p).
const versionTimeout = 5 * time.Second

// isPodman reports whether a version answer is Podman's.
func isPodman(v types.Version) bool {
	for _, c := range v.Components {
		if strings.Contains(c.Name, "Podman") {
			return true
		}
	}
	return false
}

// podmanSummary is fromSummary for Podman's listing: a running container
// whose Status text carries no health verdict may still have a check (the
// listing of some Podman versions leaves it out), so it is inspected (ok
// false) instead of taken as having none.
func podmanSummary(c container.Summary) (catalog.Instance, bool) {
	inst, ok := fromSummary(c)
	if ok && inst.State == catalog.StateRunning && !strings.HasSuffix(strings.TrimSpace(c.Status), ")") {
		return inst, false
	}
	return inst, ok
}
