// Package dicercmd is the `caddy dicer` command and its subcommands
// (daemons, instances, explain, weight, maintenance, dashboard): they read
// and write the admin API of a running Caddy (package diceradmin) over HTTP.
package dicercmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "dicer",
		Usage: "daemons|instances|explain|weight|removed [--address <admin>] [--json]",
		Short: "Shows the daemons, instances and routes of a running Caddy's modules of this plugin",
		Long: `
Reads a running Caddy's admin endpoint (/dicer/*) and prints, as tables:

  caddy dicer daemons                  each daemon followed: state, instances, re-lists, last error
  caddy dicer instances [--selector S] each instance: state, health, addresses, ports, and its
                                       verdict (routable, or why it gets no requests)
  caddy dicer explain HOST             each route: where a request for HOST goes now, why the
                                       other instances get none, and whether a certificate would be
                                       issued for HOST
  caddy dicer explain HOST/PATH        the same for a request path (caddy.path, R2d)
  caddy dicer dashboard [--listen A]   serves the dashboard on 127.0.0.1:2020 (or A) for a browser
  caddy dicer weight [S] N|clear       sets (or clears) the runtime weight of the instances the
                     [--instance NAME] selector S or --instance chooses (lb_policy dicer_weighted)
  caddy dicer removed                  the instances removed while on standby (docker rm, prune):
                                       their hosts answer 503 and nothing will wake them (R5o)

--json prints the admin endpoint's JSON instead, for scripts. The admin
endpoint is found as 'caddy stop' finds it: --address, else the config's
admin address (--config, --adapter), else localhost:2019.
`,
		CobraFunc: dicerCommand,
	})
}

// dicerCommand builds `caddy dicer` and its subcommands, once every
// backend has registered its modules.
func dicerCommand(cmd *cobra.Command) {
	cmd.Short = "Shows the daemons, instances and routes of a running Caddy's " + diceradmin.AllOf(diceradmin.Kinds("")) + " modules"
	cmd.PersistentFlags().String("address", "", "The admin API's address, if not the config's or the default (localhost:2019)")
	cmd.PersistentFlags().StringP("config", "c", "", "A config file to read the admin address from, if --address is not given")
	cmd.PersistentFlags().StringP("adapter", "a", "", "The adapter of --config")
	cmd.PersistentFlags().Bool("json", false, "Print the admin API's JSON instead of a table")

	daemons := &cobra.Command{
		Use:   "daemons",
		Short: "Lists the daemons followed: state, instances, re-lists, last error",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var list []diceradmin.DaemonStatus
			return query(c, "/dicer/daemons", &list, func(w io.Writer) error { return printDaemons(w, list, time.Now()) })
		},
	}
	instances := &cobra.Command{
		Use:   "instances [--selector S]",
		Short: "Lists the instances and why each gets requests or not",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			uri := "/dicer/instances"
			if sel, _ := c.Flags().GetString("selector"); sel != "" {
				uri += "?selector=" + url.QueryEscape(sel)
			}
			var list []diceradmin.InstanceStatus
			return query(c, uri, &list, func(w io.Writer) error { return printInstances(w, list) })
		},
	}
	instances.Flags().String("selector", "", "Only the instances this label selector matches, e.g. app=web")
	explain := &cobra.Command{
		Use:   "explain HOST[/PATH]",
		Short: "Says where a request for HOST (and PATH) goes on each route, and why not elsewhere",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var e diceradmin.Explanation
			return query(c, explainURI(args[0]), &e, func(w io.Writer) error { return printExplanation(w, e) })
		},
	}
	dns := &cobra.Command{
		Use:   "dns",
		Short: "Lists the zones of the permissions' dns_records: records published, pending, in their grace period, not Caddy's, last error",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var list []diceradmin.DNSZoneStatus
			return query(c, "/dicer/dns", &list, func(w io.Writer) error { return printDNS(w, list, time.Now()) })
		},
	}
	cmd.AddCommand(daemons, instances, explain, dns, weightCommand())
	cmd.AddCommand(maintenanceCommand())                // maintenance.go
	cmd.AddCommand(dashboardCommand())                  // dashboard.go
	cmd.AddCommand(removedCommand())                    // removed.go
	cmd.AddCommand(rolloutsCommand(), rolloutCommand()) // rollouts.go
}

// query GETs uri from the admin endpoint the flags name, and prints it as
// JSON (--json) or, decoded into v, with table.
func query(cmd *cobra.Command, uri string, v any, table func(io.Writer) error) error {
	return adminCall(cmd, http.MethodGet, uri, nil, v, table)
}

// adminCall sends method uri, with body as JSON unless nil, to the admin
// endpoint the flags name, and prints the answer as JSON (--json) or,
// decoded into v, with table. Every `caddy dicer` subcommand goes through
// it.
func adminCall(cmd *cobra.Command, method, uri string, body []byte, v any, table func(io.Writer) error) error {
	flags := cmd.Flags()
	address, _ := flags.GetString("address")
	config, _ := flags.GetString("config")
	adapter, _ := flags.GetString("adapter")
	asJSON, _ := flags.GetBool("json")
	admin, err := caddycmd.DetermineAdminAPIAddress(address, nil, config, adapter)
	if err != nil {
		return fmt.Errorf("finding the admin API: %w", err)
	}
	var headers http.Header
	var reader io.Reader
	if body != nil {
		headers = http.Header{"Content-Type": []string{"application/json"}}
		reader = bytes.NewReader(body)
	}
	resp, err := caddycmd.AdminAPIRequest(admin, method, uri, headers, reader)
	if err != nil {
		return fmt.Errorf("asking Caddy's admin API at %s: %w", admin, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading %s: %w", uri, err)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		_, err := out.Write(answer)
		return err
	}
	if err := json.Unmarshal(answer, v); err != nil {
		return fmt.Errorf("decoding %s: %w (is the plugin in that Caddy?)", uri, err)
	}
	return table(out)
}

// newTable is an aligned table on w; Flush it.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func printDaemons(w io.Writer, list []diceradmin.DaemonStatus, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintf(w, "no daemon followed: no loaded config has a %s module\n", diceradmin.OneOf(diceradmin.Kinds("")))
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "KIND\tADDRESS\tVERSION\tSTATE\tSINCE\tINSTANCES\tROUTABLE\tRELISTS\tLAST EVENT\tLAST ERROR")
	for _, d := range list {
		lastEvent := "-"
		if d.LastEvent != nil {
			lastEvent = ago(now, *d.LastEvent)
		}
		lastError := "-"
		if d.LastError != "" {
			lastError = cell(d.LastError)
			if d.LastErrorAt != nil {
				lastError += " (" + ago(now, *d.LastErrorAt) + ")"
			}
		}
		relists := strconv.Itoa(d.Relists)
		if d.LastRelistCause != "" {
			relists += " (" + cell(d.LastRelistCause) + ")"
		}
		version := orDash(d.Version)
		if len(d.VersionWarnings) > 0 {
			version += " (" + strconv.Itoa(len(d.VersionWarnings)) + " warning"
			if len(d.VersionWarnings) > 1 {
				version += "s"
			}
			version += ")"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(d.Kind), cell(d.Address), cell(version), cell(d.State), ago(now, d.Since),
			d.Instances, d.Routable, relists, lastEvent, lastError)
	}
	return t.Flush()
}

func printDNS(w io.Writer, list []diceradmin.DNSZoneStatus, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no dns_records: no loaded permission publishes DNS records")
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "DAEMON\tZONE\tPUBLISHED\tPENDING\tGRACE\tNOT OURS\tOVER BOUNDS\tLAST ERROR")
	for _, z := range list {
		lastError := "-"
		if z.LastError != "" {
			lastError = cell(z.LastError)
			if !z.RetryAt.IsZero() {
				lastError += " (retried in " + z.RetryAt.Sub(now).Round(time.Second).String() + ")"
			}
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", cell(z.Kind+" "+z.Daemon), cell(z.Zone),
			z.Published, z.Pending, z.Gone, z.Foreign, z.Dropped, lastError)
	}
	return t.Flush()
}

func printInstances(w io.Writer, list []diceradmin.InstanceStatus) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no instance")
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "DAEMON\tNAME\tSTATE\tHEALTH\tADDRESSES\tPUBLISHED\tWEIGHT\tVERDICT")
	for _, in := range list {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(in.Kind+" "+in.Daemon), cell(in.Name), cell(in.State), cell(in.Health),
			cell(orDash(addresses(in.Networks))), cell(orDash(published(in.Ports))), weightCell(in), cell(withTypos(in.Verdict, in.LabelTypos)))
	}
	return t.Flush()
}

func printExplanation(w io.Writer, e diceradmin.Explanation) error {
	if len(e.Routes) == 0 {
		fmt.Fprintf(w, "%s: no %s route is loaded\n", cell(e.Host), diceradmin.OneOf(diceradmin.Kinds(diceradmin.UpstreamsNamespace)))
	}
	for i, r := range e.Routes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		verdict := "no upstream: 503"
		if r.Wake != "" {
			verdict = "no upstream now: " + r.Wake
		}
		if r.Deferred {
			verdict = "no upstream here: another source of its dynamic multi serves (R5b)"
		}
		if len(r.Targets) > 0 {
			verdict = strconv.Itoa(len(r.Targets)) + " target(s): " + strings.Join(cells(r.Targets), ", ")
		}
		at := "host " + cell(e.Host)
		if e.Path != "" {
			at += ", path " + cell(e.Path)
		}
		fmt.Fprintf(w, "route %s (%s %s), %s: %s\n", cell(r.Route), cell(r.Kind), cell(r.Daemon), at, verdict)
		if len(r.Candidates) == 0 {
			fmt.Fprintln(w, "  no instance is a candidate: none lists the host in caddy.host, or none matches the selector")
			continue
		}
		t := newTable(w)
		fmt.Fprintln(t, "  INSTANCE\tTARGET\tDIAL\tWHY")
		for _, c := range r.Candidates {
			target := "no"
			if c.Target {
				target = "yes"
			}
			fmt.Fprintf(t, "  %s\t%s\t%s\t%s\n", cell(c.Instance), target, cell(orDash(c.Dial)), cell(withTypos(c.Why, c.LabelTypos)))
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	for _, c := range e.Certificates {
		decision := "refused"
		if c.Allowed {
			decision = "allowed"
		}
		fmt.Fprintf(w, "certificate for %s (permission %s %s): %s, %s\n", cell(e.Host), cell(c.Kind), cell(c.Daemon), decision, cell(c.Why))
	}
	return nil
}

// ago says how long before now t was, in whole seconds.
func ago(now, t time.Time) string {
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// addresses are an instance's addresses, each as network=address (the
// address alone on a network without a name).
func addresses(nets []diceradmin.NetworkStatus) string {
	var out []string
	for _, n := range nets {
		a := n.Address
		if a == "" {
			a = "none"
		}
		if n.Network != "" {
			a = n.Network + "=" + a
		}
		out = append(out, a)
	}
	return strings.Join(out, ",")
}

// published are an instance's published ports as host:port->guest/proto,
// * for every host address.
func published(ports []diceradmin.PortStatus) string {
	var out []string
	for _, p := range ports {
		host := p.HostIP
		if host == "" {
			host = "*"
		}
		out = append(out, fmt.Sprintf("%s:%d->%d/%s", host, p.HostPort, p.GuestPort, p.Protocol))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// withTypos is a verdict followed by the instance's misspelt label keys
// (R13c): `routable; label caddy.hots is not one caddy-dicer knows: did
// you mean caddy.host?`.
func withTypos(verdict string, typos []diceradmin.LabelTypo) string {
	for _, t := range typos {
		verdict += "; " + t.String()
	}
	return verdict
}

// explainURI is the admin API's URI explaining arg, a host with, after
// its first `/`, a path (R2d): `shop.example.com/api/x`.
func explainURI(arg string) string {
	host, path, found := strings.Cut(arg, "/")
	uri := "/dicer/explain?host=" + url.QueryEscape(host)
	if found {
		uri += "&path=" + url.QueryEscape("/"+path)
	}
	return uri
}
