//go:build unix

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// instanceProcessCommand is the hidden command the daemon runs as each
// instance's process.
const instanceProcessCommand = "instance-process"

// instanceCommand returns the Host's Command: exe (this program) run as an
// instance's process, with env added to the environment. The process is
// in a process group of its own, so that a Ctrl-C meant for the daemon
// does not end it (the daemon does), and on Linux dies with the daemon.
func instanceCommand(exe string, env []string) func(name, addr string) *exec.Cmd {
	return func(name, addr string) *exec.Cmd {
		cmd := exec.Command(exe, instanceProcessCommand, "--name", name, "--addr", addr)
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = instanceSysProcAttr()
		return cmd
	}
}

// instanceProcess serves HTTP as an instance until SIGTERM or killed.
func instanceProcess(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(instanceProcessCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the instance's `name`, in every answer")
	addr := fs.String("addr", "", "the `address` to serve on, ip:port")
	if err := fs.Parse(args); err != nil || *name == "" || *addr == "" {
		fmt.Fprintln(stderr, "dicer-testd: instance-process needs --name and --addr")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := dicertest.ServeHelloProcess(ctx, *addr, *name); err != nil {
		fmt.Fprintf(stderr, "dicer-testd: instance %s: %v\n", *name, err)
		return exitFail
	}
	return exitOK
}
