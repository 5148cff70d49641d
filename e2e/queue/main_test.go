//go:build e2e && linux

// Package queue is the end-to-end test of the queue at capacity (R5q) on
// the real Docker Engine: Caddy built with xcaddy and this checkout's
// plugin, as the docs tell users to build it, run as its own process;
// containers of the test image labelled caddy.max_requests; requests and
// metrics through Caddy's own listeners and admin endpoint.
package queue

import (
	"os"
	"testing"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// The run's shared fixture, set before m.Run.
var (
	cli      *client.Client
	caddyBin string
)

func TestMain(m *testing.M) {
	// Every container its Caddys see is made by dockertest: they follow
	// this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(dockertest.MainE2E(m, "e2e/queue", &cli, &caddyBin))
}
