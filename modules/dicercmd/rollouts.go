package dicercmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// rolloutsCommand is `caddy dicer rollouts`: GET /dicer/rollouts (R4f).
func rolloutsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rollouts",
		Short: "Lists the progressive rollouts of the routes: versions, step, shares, errors, p99, verdict and why",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var list []diceradmin.RolloutStatus
			return query(c, "/dicer/rollouts", &list, func(w io.Writer) error { return printRollouts(w, list, time.Now()) })
		},
	}
}

// rolloutCommand is `caddy dicer rollout promote|abort <route>`: POST
// /dicer/rollouts.
func rolloutCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rollout promote|abort <route> [<hosts>]",
		Short: "Promotes a route's rollout (100% now, the old version drained) or aborts it (0% now)",
		Long: `Overrides the verdict of a route's rollout, for every Caddy of the fleet:
promote passes every step now, abort rolls the new version back to 0%.
The route is named as 'caddy dicer rollouts' shows it (its selector, port
and network settings):

  caddy dicer rollout promote app=shop
  caddy dicer rollout abort 'app=shop port 8080'

A route serving several hosts has a rollout per hosts (the instances
whose caddy.host lists the same hosts); name them, as the HOSTS column
shows them, to pick one, else every rollout of the route is overridden:

  caddy dicer rollout abort 'app=shop' shop.example.com,www.shop.example.com`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] != "promote" && args[0] != "abort" {
				return fmt.Errorf("%q: promote or abort", args[0])
			}
			cmd := diceradmin.RolloutCommand{Route: args[1], Action: args[0]}
			if len(args) == 3 {
				cmd.Hosts = args[2]
			}
			body, err := json.Marshal(cmd)
			if err != nil {
				return err
			}
			var list []diceradmin.RolloutStatus
			return adminCall(c, http.MethodPost, "/dicer/rollouts", body, &list, func(w io.Writer) error { return printRollouts(w, list, time.Now()) })
		},
	}
}

func printRollouts(w io.Writer, list []diceradmin.RolloutStatus, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no rollout: no route's instances carry caddy.rollout beside a second version")
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "ROUTE\tHOSTS\tOLD\tNEW\tSTEP\tSHARES (OLD/NEW)\tERRORS (OLD/NEW)\tP99 (OLD/NEW)\tVERDICT\tSINCE\tWHY")
	for _, r := range list {
		steps := make([]string, len(r.Steps))
		for i, s := range r.Steps {
			steps[i] = strconv.Itoa(s) + "%"
		}
		verdict := string(r.Verdict)
		if r.Drained {
			verdict += " (old drained)"
		}
		since := r.StepStart
		if !r.Ended.IsZero() {
			since = r.Ended
		}
		why := r.Why
		if r.Blocked != "" {
			why = strings.TrimSuffix("blocked: "+r.Blocked+"; "+why, "; ")
			if r.Verdict == "" {
				verdict = "refused"
			}
		}
		sinceText := "-"
		if !since.IsZero() {
			sinceText = ago(now, since)
		}
		hosts := r.Hosts
		if hosts == "" {
			hosts = "*"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d/%d (%s)\t%d%%/%d%%\t%.2f%%/%.2f%%\t%s/%s\t%s\t%s\t%s\n",
			cell(r.Route), cell(hosts), cell(short(r.Old)), cell(short(r.New)), r.Step+1, len(r.Steps), strings.Join(steps, ","),
			100-r.Share, r.Share, r.OldFigures.ErrorRate, r.NewFigures.ErrorRate, r.OldFigures.P99, r.NewFigures.P99,
			verdict, sinceText, cell(why))
	}
	return t.Flush()
}

// short cuts an image ID for a table: sha256:0123456789ab.
func short(v string) string {
	if rest, ok := strings.CutPrefix(v, "sha256:"); ok && len(rest) > 12 {
		return "sha256:" + rest[:12]
	}
	if len(v) > 40 {
		return v[:40] + "..."
	}
	return v
}
