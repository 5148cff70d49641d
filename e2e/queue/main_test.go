//go:build e2e && linux

// Package queue is the end-to-end test of the queue at capacity (R5q) on
// the real Docker Engine: Caddy built with xcaddy and this checkout's
// plugin, as the docs tell users to build it, run as its own process;
// containers of the test image labelled caddy.max_requests; requests and
// metrics through Caddy's own listeners and admin endpoint.
package queue

import (
	"flag"
	"fmt"
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
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/queue: skipped under -short: needs the Docker Engine and the network to build Caddy; run make test-e2e")
		os.Exit(0)
	}
	os.Exit(dockertest.MainWithCaddy(m, "e2e/queue", func(c *client.Client, bin string) (func(), error) {
		cli, caddyBin = c, bin
		return nil, nil
	}))
}
