package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/daemonver"
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
//   - Inspecting a container that is being removed can answer 500 "...
//     does not exist in database: no such container" instead of 404:
//     read as not found (podmanGone), not as a failed session.
//   - A rootless container's network is in the user's namespace: Podman
//     reports either no address or one on its own bridge there, which
//     nothing outside reaches (and which may even be the address of a
//     rootful container on the host's bridge of the same subnet). A daemon
//     whose /info says it is rootless (Podman's field "Rootless": true,
//     the rootless Docker Engine's security option "name=rootless") has
//     its containers' addresses dropped (R11r): only their published ports reach them,
//     which the catalog routes to as for any container without an
//     address (R3).

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

// infoTimeout bounds the /info call that tells a rootless daemon (R11r).
const infoTimeout = 10 * time.Second

// askRootless reports whether the daemon runs rootless (R11r). Without an
// answer it is taken as rootful, as before this check: the addresses the
// daemon gives are used.
func (c *conn) askRootless(ctx context.Context) bool {
	ictx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	rootless, err := c.eng.Rootless(ictx)
	if err != nil {
		c.log.Debug("no /info answer: container addresses are used", zap.Error(err))
		return false
	}
	return rootless
}

// maxInfo bounds the /info answer read.
const maxInfo = 1 << 20

// readRootless reads an /info answer: the rootless Docker Engine lists the
// security option "name=rootless"; Podman (whose security options do not)
// answers its own field "Rootless": true.
func readRootless(body []byte) (bool, error) {
	var info struct {
		SecurityOptions []string
		Rootless        bool
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return false, fmt.Errorf("reading /info: %w", err)
	}
	if info.Rootless {
		return true, nil
	}
	for _, opt := range info.SecurityOptions {
		for _, kv := range strings.Split(opt, ",") {
			if kv == "name=rootless" {
				return true, nil
			}
		}
	}
	return false, nil
}

// clientEngine is the Docker client as the adapter's engine, with the one
// call it lacks: /info read for Podman's own "Rootless" field, which the
// client's Info drops.
type clientEngine struct {
	*client.Client
	tls bool // the client speaks TLS to a TCP address
}

// ContainerListHealth implements engine.
func (e clientEngine) ContainerListHealth(ctx context.Context, o container.ListOptions) ([]Listed, error) {
	return ListWithHealth(ctx, e.Client, o, e.tls)
}

// Rootless implements engine.
func (e clientEngine) Rootless(ctx context.Context) (bool, error) {
	u, err := client.ParseHostURL(e.DaemonHost())
	if err != nil {
		return false, err
	}
	scheme, host := "http", u.Host
	if e.tls {
		scheme = "https"
	}
	if u.Scheme == "unix" || u.Scheme == "npipe" {
		host = client.DummyHost // the transport dials the socket
	}
	path := "/info"
	if v := e.ClientVersion(); v != "" {
		path = "/v" + v + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+path, nil)
	if err != nil {
		return false, err
	}
	resp, err := e.HTTPClient().Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET /info: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInfo))
	if err != nil {
		return false, err
	}
	return readRootless(body)
}

// reachable drops a rootless daemon's container addresses (R11r): only
// published ports reach such a container from outside its namespace.
func (c *conn) reachable(in catalog.Instance) catalog.Instance {
	if !c.rootless {
		return in
	}
	for i := range in.Networks {
		in.Networks[i].Address, in.Networks[i].Gateway = "", ""
	}
	return in
}

// podmanGone reports whether an inspection's error is Podman's answer for a
// container removed meanwhile when it does not come as a 404: "container
// ID does not exist in database: no such container" (R11p). Taken as an
// error, it ended the session and the routes waited seconds for the
// reconnection.
func podmanGone(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such container")
}

// versionOf is what the Engine's /version says of it (R9a): the product
// is its Engine component's name ("Engine" for Docker's, "Podman Engine"
// for Podman's), else its platform's.
func versionOf(v types.Version) daemonver.Version {
	product := v.Platform.Name
	for _, c := range v.Components {
		if strings.Contains(c.Name, "Engine") {
			product = c.Name
			break
		}
	}
	if product == "Engine" || product == "" {
		product = "Docker Engine"
	}
	return daemonver.New(product, v.Version, v.APIVersion)
}
