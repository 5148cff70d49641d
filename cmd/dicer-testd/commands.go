//go:build unix

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// callTimeout bounds one command's talk with the daemon (run waits for the
// instance's process to serve, at most 10 s).
const callTimeout = 20 * time.Second

// labelFlags is a repeatable --label k=v.
type labelFlags map[string]string

func (l labelFlags) String() string { return formatLabels(l) }

func (l labelFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	l[k] = v
	return nil
}

// newFlags returns a command's flag set with --socket, and the socket flag.
func newFlags(name, args string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: dicer-testd %s [flags]%s\n", name, args)
		fs.PrintDefaults()
	}
	return fs, fs.String("socket", exampleSocket(), "the daemon's gRPC unix socket `path` (commands go to path.ctl)")
}

// parse parses flags that may come before, between or after the
// positional arguments (stop api --socket s), and returns the latter.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs, socket := newFlags("run", "", stderr)
	labels := labelFlags{}
	var req dicertest.RunRequest
	fs.StringVar(&req.Name, "name", "", "the instance's `name` (required); it answers \"hello from NAME\"")
	fs.Var(labels, "label", "a label `key=value`; repeat for more (caddy.host=api.localhost routes that host to it)")
	fs.DurationVar(&req.StandbyAfter, "standby-after", 0, "record standby_after `duration` and publish the port on 127.0.0.1 (a free port): "+
		"a connection there wakes the instance from standby; this daemon never goes idle by itself: `standby NAME` does it")
	fs.StringVar(&req.IP, "ip", "", "the instance's `address` in 127.0.0.0/8 (default: the first free from 127.0.0.100)")
	fs.IntVar(&req.Port, "port", dicertest.DefaultInstancePort, "the `port` it serves HTTP on")
	fs.BoolVar(&req.Health, "health", false, "give it an HTTP health check on its port (reported healthy once it serves)")
	pos, err := parse(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 || req.Name == "" {
		fmt.Fprintln(stderr, "dicer-testd run: give the instance a --name, and no arguments")
		fs.Usage()
		return exitUsage
	}
	req.Labels = labels
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	inst, err := dicertest.NewControlClient(controlPath(*socket)).Run(ctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "dicer-testd run: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s: %s\n", inst.GetName(), dicertest.Describe(inst))
	return exitOK
}

// verbCommand is stop, start or standby: the verb, on each name given.
func verbCommand(verb string) func([]string, io.Writer, io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		return eachName(verb, args, stdout, stderr, func(ctx context.Context, cc *dicertest.ControlClient, name string) (string, error) {
			inst, err := cc.Do(ctx, verb, name)
			if err != nil {
				return "", err
			}
			return dicertest.Describe(inst), nil
		})
	}
}

func cmdRm(args []string, stdout, stderr io.Writer) int {
	return eachName("rm", args, stdout, stderr, func(ctx context.Context, cc *dicertest.ControlClient, name string) (string, error) {
		return "removed", cc.Remove(ctx, name)
	})
}

// eachName runs do on each NAME argument, printing "NAME: what it says",
// and fails if any failed.
func eachName(verb string, args []string, stdout, stderr io.Writer,
	do func(context.Context, *dicertest.ControlClient, string) (string, error)) int {
	fs, socket := newFlags(verb, " NAME...", stderr)
	names, err := parse(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(names) == 0 {
		fmt.Fprintf(stderr, "dicer-testd %s: name the instances\n", verb)
		fs.Usage()
		return exitUsage
	}
	cc := dicertest.NewControlClient(controlPath(*socket))
	code := exitOK
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		said, err := do(ctx, cc, name)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "dicer-testd %s %s: %v\n", verb, name, err)
			code = exitFail
			continue
		}
		fmt.Fprintf(stdout, "%s: %s\n", name, said)
	}
	return code
}

// cmdLs lists the instances through the daemon's Dicer API, as Caddy sees
// them.
func cmdLs(args []string, stdout, stderr io.Writer) int {
	fs, socket := newFlags("ls", "", stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fs.Usage()
		return exitUsage
	}
	insts, err := listInstances(*socket)
	if err != nil {
		fmt.Fprintf(stderr, "dicer-testd ls: %v\n", err)
		return exitFail
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tADDRESS\tPUBLISHED\tSTANDBY AFTER\tLABELS")
	for _, inst := range insts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", inst.GetName(), stateColumn(inst), orDash(inst.GetIp()),
			orDash(publishedColumn(inst)), orDash(standbyColumn(inst)), orDash(formatLabels(inst.GetLabels())))
	}
	if err := tw.Flush(); err != nil {
		return exitFail
	}
	return exitOK
}

func listInstances(socket string) ([]*dicerpb.Instance, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := dicerpb.NewDaemonServiceClient(cc).ListInstances(ctx, &dicerpb.ListInstancesRequest{})
	if err != nil {
		return nil, fmt.Errorf("no test daemon answers on %s (is `make example` running?): %w", socket, err)
	}
	return resp.GetInstances(), nil
}

func stateColumn(inst *dicerpb.Instance) string {
	s := dicertest.StateName(inst.GetState())
	if h := inst.GetHealth(); h != nil {
		s += " (" + strings.ToLower(strings.TrimPrefix(h.GetStatus().String(), "HEALTH_STATUS_")) + ")"
	}
	return s
}

func publishedColumn(inst *dicerpb.Instance) string {
	var out []string
	for _, p := range inst.GetPorts() {
		host := p.GetHostIp()
		if host != "" {
			host += ":"
		}
		out = append(out, fmt.Sprintf("%s%d->%d", host, p.GetHostPort(), p.GetGuestPort()))
	}
	return strings.Join(out, ",")
}

func standbyColumn(inst *dicerpb.Instance) string {
	if sa := inst.GetStandbyAfter(); sa != nil {
		return sa.AsDuration().String()
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
