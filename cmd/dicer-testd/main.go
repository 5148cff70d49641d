//go:build unix

// Command dicer-testd runs the in-memory test daemon of package dicertest
// by hand, for trying caddy-dicer without KVM, and tells it what to do.
//
// Without a command it is the daemon: it serves the Dicer gRPC API on a
// unix socket (and optionally over TLS on TCP), runs each instance as a
// small process that answers HTTP requests with "hello from <name>" on the
// instance's 127.0.0.x address, and takes orders on a control socket next
// to the gRPC one (the socket's path + ".ctl").
//
//	dicer-testd [-socket PATH] [-listen 127.0.0.1:7443] [-instances instances.json]
//
// instances.json lists the instances to run at start:
//
//	[{"name":"web-1","labels":{"app":"web","caddy.host":"localhost"},"ip":"127.0.0.11","port":8080,"health":false}]
//
// With "health": true the instance gets an HTTP health check on its port and
// is reported healthy once it serves.
//
// With a command it talks to a running daemon, in Dicer's words:
//
//	dicer-testd run --name api --label caddy.host=api.localhost [--standby-after 1m]
//	dicer-testd stop|start|standby|rm NAME...
//	dicer-testd ls
//
// Every command takes --socket PATH, the daemon's gRPC socket. The default,
// for the daemon and the commands alike, is the socket of `make example`:
// $TMPDIR/caddy-dicer-example-<uid>/dicer.sock ($TMPDIR defaults to /tmp).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one of the CLI's commands.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands in the order usage lists them.
var commands = []command{
	{"run", "create and start an instance that answers HTTP with its name", cmdRun},
	{"stop", "stop instances: their process ends, they leave every route", verbCommand("stop")},
	{"start", "start stopped instances, or resume instances on standby", verbCommand("start")},
	{"standby", "freeze instances; one run with --standby-after is woken by a connection to its published port", verbCommand("standby")},
	{"rm", "stop and delete instances", cmdRm},
	{"ls", "list the daemon's instances (through its Dicer API)", cmdLs},
}

// cli runs dicer-testd with args (without the program name) and returns the
// exit code.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			usage(stdout)
			return exitOK
		case instanceProcessCommand:
			return instanceProcess(args[1:], stderr)
		}
		for _, c := range commands {
			if c.name == args[0] {
				return c.run(args[1:], stdout, stderr)
			}
		}
		if args[0] != "" && args[0][0] != '-' {
			fmt.Fprintf(stderr, "dicer-testd: unknown command %q\n", args[0])
			usage(stderr)
			return exitUsage
		}
	}
	return daemonMain(args, stderr)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  dicer-testd [-socket PATH] [-listen ADDR] [-instances FILE]   run the test daemon
  dicer-testd COMMAND [flags] [NAME...]                          tell it what to do

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Every command takes --socket PATH (default %s).
"dicer-testd COMMAND -h" lists a command's flags.
`, exampleSocket())
}

// exampleSocket is the gRPC socket of `make example` (example/run.sh makes
// the same path): $TMPDIR/caddy-dicer-example-<uid>/dicer.sock.
func exampleSocket() string {
	return filepath.Join(os.TempDir(), "caddy-dicer-example-"+strconv.Itoa(os.Getuid()), "dicer.sock")
}

// controlPath is the control socket of the daemon serving gRPC on socket.
func controlPath(socket string) string { return socket + ".ctl" }
