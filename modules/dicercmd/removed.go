package dicercmd

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// removedCommand is `caddy dicer removed`: the instances removed while on
// standby (R5o), whose hosts answer 503 saying so.
func removedCommand() *cobra.Command {
	return &cobra.Command{
		Use: "removed",
		Short: "Lists the instances removed while on standby (docker rm, docker system prune): " +
			"their hosts answer 503 and nothing will wake them; listed until claimed again, or for 24 h",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var list []diceradmin.RemovedSleeper
			return query(c, "/dicer/removed", &list, func(w io.Writer) error { return printRemoved(w, list, time.Now()) })
		},
	}
}

func printRemoved(w io.Writer, list []diceradmin.RemovedSleeper, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "No instance was removed while on standby (in the last 24 h, or its hosts were claimed since).")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "DAEMON\tINSTANCE\tID\tHOSTS\tREMOVED\tLISTED UNTIL")
	for _, r := range list {
		id := r.ID
		if len(id) > 12 {
			id = id[:12]
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Address, cell(r.Name), id,
			orDash(cell(strings.Join(r.Hosts, ","))), ago(now, r.RemovedAt), r.ListedUntil.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
