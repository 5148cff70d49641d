//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// instanceSpec is one entry of the -instances file.
type instanceSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	IP     string            `json:"ip"`
	Port   int               `json:"port"`
	Health bool              `json:"health"`
}

// daemonConfig is what the daemon serves and how it runs instances.
type daemonConfig struct {
	socket    string // the gRPC unix socket; the control socket is next to it
	listen    string // optional TCP address for gRPC over TLS
	instances string // optional JSON file of instances to run at start
	// command runs an instance's process (tests run themselves).
	command func(name, addr string) *exec.Cmd
	logf    func(format string, args ...any)
}

// daemon is a running test daemon.
type daemon struct {
	d           *dicertest.Daemon
	host        *dicertest.Host
	stopControl func()
	tcpAddr     string
}

// daemonMain runs the daemon until SIGINT or SIGTERM.
func daemonMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("dicer-testd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", exampleSocket(), "unix socket `path` to serve on (plaintext, no auth); the control socket is path.ctl")
	listen := fs.String("listen", "", "optional TCP `address` to serve on with TLS and tokens, e.g. 127.0.0.1:7443")
	instances := fs.String("instances", "", "JSON `file` listing instances to run (name, labels, ip in 127.0.0.0/8, port, health)")
	fs.Usage = func() { usage(stderr); fmt.Fprintln(stderr, "\nDaemon flags:"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dicer-testd: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	logger := log.New(stderr, "dicer-testd: ", 0)
	exe, err := os.Executable()
	if err != nil {
		logger.Print(err)
		return exitFail
	}
	if *socket == exampleSocket() {
		if err := os.MkdirAll(filepath.Dir(*socket), 0o700); err != nil {
			logger.Print(err)
			return exitFail
		}
	}
	dm, err := startDaemon(daemonConfig{
		socket: *socket, listen: *listen, instances: *instances,
		command: instanceCommand(exe, nil), logf: logger.Printf,
	})
	if err != nil {
		logger.Print(err)
		return exitFail
	}
	defer dm.close()
	logger.Printf("serving the Dicer API on unix://%s", *socket)
	if dm.tcpAddr != "" {
		logger.Printf("serving the Dicer API over TLS on %s", dm.tcpAddr)
		fmt.Printf("token: %s\n", dm.d.AddToken("caddy"))
		fmt.Printf("fingerprint: %s\n", dm.d.Fingerprint())
	}
	logger.Printf("taking commands on %s (dicer-testd run, stop, start, standby, rm, ls)", controlPath(*socket))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Print("shutting down")
	return exitOK
}

// startDaemon starts a daemon as cfg says: the instances of cfg.instances
// run, then the gRPC and control sockets serve.
func startDaemon(cfg daemonConfig) (_ *daemon, err error) {
	specs, err := readInstances(cfg.instances)
	if err != nil {
		return nil, err
	}
	dm := &daemon{d: dicertest.New()}
	defer func() {
		if err != nil {
			dm.close()
		}
	}()
	// Every instance is on one network whose gateway is 127.0.0.1: ports
	// an instance publishes are reached there, which is where Caddy's
	// route to an instance on standby goes to wake it.
	dm.host, err = dicertest.NewHost(dm.d, dicertest.HostConfig{Subnet: "127.0.0.0/8", Gateway: "127.0.0.1", Command: cfg.command, Logf: cfg.logf})
	if err != nil {
		return nil, err
	}
	ctl := dicertest.NewControl(dm.host)
	for i, s := range specs {
		inst, err := ctl.Run(dicertest.RunRequest{Name: s.Name, Labels: s.Labels, IP: s.IP, Port: s.Port, Health: s.Health})
		if err != nil {
			return nil, fmt.Errorf("%s: instance %d (%s): %w", cfg.instances, i+1, s.Name, err)
		}
		if cfg.logf != nil {
			cfg.logf("instance %s: serving http://%s:%d/ (labels %s)", s.Name, inst.GetIp(), s.Port, formatLabels(s.Labels))
		}
	}
	ctl.Logf = cfg.logf
	if err := dm.d.ServeUnix(cfg.socket); err != nil {
		return nil, err
	}
	if dm.stopControl, err = dicertest.ServeControl(ctl, controlPath(cfg.socket)); err != nil {
		return nil, err
	}
	if cfg.listen != "" {
		if dm.tcpAddr, err = dm.d.ServeTCP(cfg.listen); err != nil {
			return nil, err
		}
	}
	return dm, nil
}

// close stops serving and ends every instance's process.
func (dm *daemon) close() {
	if dm.stopControl != nil {
		dm.stopControl()
	}
	if dm.host != nil {
		dm.host.Close()
	}
	dm.d.Close()
}

// readInstances reads the -instances file; "" is none.
func readInstances(file string) ([]instanceSpec, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var specs []instanceSpec
	if err := json.Unmarshal(data, &specs); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i, s := range specs {
		if s.Name == "" || s.IP == "" || s.Port == 0 {
			return nil, fmt.Errorf("%s: instance %d: %w", file, i+1, errors.New("name, ip and port are required"))
		}
	}
	return specs, nil
}

// formatLabels is labels as sorted k=v pairs, comma-separated.
func formatLabels(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}
