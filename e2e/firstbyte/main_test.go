//go:build e2e && linux

// Package firstbyte measures, end to end, what a visitor to a sleeping
// site waits for (R5n): Caddy built with xcaddy and this checkout's
// plugin, the real Docker Engine and a container of the test image, and
// a client in a network namespace of the test's own, 25 ms away each way
// (tc netem on both ends of a veth pair), fetching over HTTPS with curl.
// One Caddy, two HTTPS servers that differ only in dicer_prewake, taken
// in turns.
package firstbyte

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

// The run's shared fixture, set before m.Run.
var (
	cli      *client.Client
	caddyBin string
	link     *delayedLink
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/firstbyte: skipped under -short: needs root, the Docker Engine and the network to build Caddy; run make test-e2e")
		os.Exit(0)
	}
	// Every container its Caddy sees is made by dockertest: it follows
	// this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(dockertest.MainWithCaddy(m, "e2e/firstbyte", start))
}

// start keeps the Engine's client and the Caddy binary, and makes the
// delayed link, which a signal removes too.
func start(c *client.Client, bin string) (stop func(), err error) {
	cli, caddyBin = c, bin
	if link, err = newDelayedLink(fmt.Sprintf("cdfb-%d", os.Getpid()), 25*time.Millisecond); err != nil {
		return nil, err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		link.remove()
		os.Exit(1)
	}()
	return link.remove, nil
}
