package caddydicer

import (
	"os"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/docker"
	"github.com/caddy-dicer/caddy-dicer/internal/swarm"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// SwarmManager is how a module reaches a Docker Swarm: through the Engine
// API of one of its manager nodes, read-only but for the replica count of
// a service labelled `caddy.max_replicas` (R5j). Every module that names the
// same manager with the same settings shares one connection and one
// catalog, which outlive config reloads.
//
// Each service is labelled as a container would be (`caddy.host`,
// `caddy.port`, any label a selector reads): the service's own labels,
// which Compose's `deploy.labels` set. Its running tasks are the
// instances, each reached at its own address on the service's overlay
// network (Caddy must be attached to that network: run it as a service
// or container on an attachable overlay), unless Endpoint is `vip`.
type SwarmManager struct {
	// EngineConnection holds address and tls: where the manager's Engine is
	// reached, `unix:///var/run/docker.sock` when Caddy runs on a manager
	// node, else e.g. `tcp://manager:2376`, as for the Docker modules.
	EngineConnection

	// Endpoint is where requests go: `tasks`, each running task at its own
	// address, which Caddy balances over (its lb_policy, retries and
	// passive health checks per task), taking a task out as soon as Swarm
	// shuts it down; or `vip`, the service's virtual IP, which Swarm's
	// IPVS balances per connection (one upstream per service, so Caddy's
	// policies see one; a task being shut down gets new connections until
	// Swarm takes it out of the VIP). Default: `tasks`.
	Endpoint string `json:"endpoint,omitempty"`

	// Labels are the label sets services are routed by (R2f), as for
	// the Docker modules: `caddy-dicer` (always read),
	// `caddy-docker-proxy`, `traefik`, read in each service's
	// deploy.labels, and the opt-out `skip-foreign-protections`.
	// Default: `caddy-dicer`.
	Labels []string `json:"labels,omitempty"`

	// Follow is a label selector (R8's syntax) a service's own labels
	// (deploy.labels) must match for this connection to see it at all
	// (R2g): one that does not is not listed and its tasks' events are
	// ignored, so it is never routed, allowed a certificate, or scaled.
	// A service whose labels change to match (or no longer) is seen (or
	// left) at its update. Example: `follow env=prod`. Default: the
	// `CADDY_DICER_FOLLOW` environment variable when it is set and not
	// empty, else every service.
	Follow string `json:"follow,omitempty"`

	// Readiness holds readiness_timeout, the readiness probe's bound.
	Readiness
}

// config is the adapter configuration, placeholders replaced.
func (m *SwarmManager) config() swarm.Config {
	cfg := swarm.Config{Docker: m.EngineConnection.config(), Endpoint: m.Endpoint}
	cfg.Docker.Labels, _ = labelSets(m.Labels) // checked by validateStatic and spec
	return cfg
}

// spec resolves the settings into what the Swarm adapter runs with.
func (m *SwarmManager) spec() (connSpec, error) {
	if _, err := labelSets(m.Labels); err != nil {
		return connSpec{}, err
	}
	sel, err := followSelector(m.Follow, os.Getenv) // the environment read at provision
	if err != nil {
		return connSpec{}, err
	}
	cfg := m.config()
	cfg.Docker.Follow = sel
	a, err := swarm.New(cfg)
	if err != nil {
		return connSpec{}, err
	}
	spec := newConnSpec("swarm", a.Address(), "", docker.DaemonHost(a.Address()), []string{a.Key()}, a.Loop().Run)
	logger := spec.opts.Logger
	spec.scaling = connection.Replicas(func(cat *catalog.Catalog, grew func()) (*swarm.Scaler, error) {
		// The load of this Caddy's other connections to the swarm too (R5j).
		book, release, err := dicerapp.SharedLoadBook(a.EngineKey())
		if err != nil {
			return nil, err
		}
		sc, err := a.Scaler(cat, logger, swarm.ScaleOptions{Grew: grew, Book: book, Release: release})
		if sc == nil { // endpoint vip: none; or an error
			release()
		}
		return sc, err
	})
	return spec, nil
}

// validateStatic checks the settings that need no placeholder replacement.
func (m *SwarmManager) validateStatic() error {
	// The endpoint alone: the Engine's settings are the EngineConnection's.
	if err := (swarm.Config{Endpoint: m.Endpoint, Docker: docker.Config{Host: docker.DefaultHost}}).Check(); err != nil {
		return err
	}
	if _, err := labelSets(m.Labels); err != nil {
		return err
	}
	if _, err := followSelector(m.Follow, nil); err != nil { // the setting's own; the environment's at provision
		return err
	}
	return m.EngineConnection.validateStatic()
}

// unmarshalSetting parses one manager setting of a Caddyfile block, if the
// dispenser is at one; seen catches a setting given twice.
func (m *SwarmManager) unmarshalSetting(disp *caddyfile.Dispenser, seen map[string]bool) (bool, error) {
	if ok, err := m.EngineConnection.unmarshalSetting(disp, seen); ok || err != nil {
		return ok, err
	}
	name, ok, err := settingAt(disp, seen, "endpoint", "labels", "follow")
	if !ok || err != nil {
		return ok, err
	}
	if name == "labels" {
		return true, unmarshalLabels(disp, &m.Labels)
	}
	if name == "follow" {
		return true, unmarshalFollow(disp, &m.Follow)
	}
	if err := oneValue(disp, &m.Endpoint); err != nil {
		return true, err
	}
	if m.Endpoint != swarm.EndpointTasks && m.Endpoint != swarm.EndpointVIP {
		return true, settingErrf(disp, "endpoint", "%q is neither %s nor %s", m.Endpoint, swarm.EndpointTasks, swarm.EndpointVIP)
	}
	return true, nil
}

// Interface guards
var (
	_ daemonSettings = (*SwarmManager)(nil)
)
