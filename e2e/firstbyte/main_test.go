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
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if cli, err = dockertest.NewClient(); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/firstbyte: no Engine client: %v\n", err)
		return 1
	}
	defer cli.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/firstbyte: cleanup: %v\n", err)
		}
	}()
	dir, err := os.MkdirTemp("", "cdfirstbyte-build")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/firstbyte: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs("../..")
	if err == nil {
		caddyBin, err = testkit.BuildCaddy(root, dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/firstbyte: %v\n", err)
		return 1
	}
	if link, err = newDelayedLink(fmt.Sprintf("cdfb-%d", os.Getpid()), 25*time.Millisecond); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/firstbyte: %v\n", err)
		return 1
	}
	defer link.remove()
	// A signal removes the namespace too.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		link.remove()
		os.Exit(1)
	}()
	return m.Run()
}
