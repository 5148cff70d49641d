package dicercmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// maintenanceCommand is `caddy dicer maintenance SELECTOR on|off [MESSAGE]`
// (R5i): POST /dicer/maintenance on the admin endpoint the flags name.
func maintenanceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "maintenance SELECTOR on|off [MESSAGE]",
		Short: "Puts the instances SELECTOR matches in maintenance (503 with the maintenance page) or takes them out",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(c *cobra.Command, args []string) error {
			req := diceradmin.MaintenanceRequest{Selector: args[0]}
			switch args[1] {
			case "on":
				req.On = true
			case "off":
			default:
				return fmt.Errorf("%q: say on or off", args[1])
			}
			if len(args) == 3 {
				req.Message = args[2]
			}
			return postMaintenance(c, req)
		},
	}
}

// postMaintenance sends req and prints, per daemon, how many instances
// changed and the switches now on.
func postMaintenance(cmd *cobra.Command, req diceradmin.MaintenanceRequest) error {
	raw, _ := json.Marshal(req)
	var list []diceradmin.MaintenanceStatus
	return adminCall(cmd, http.MethodPost, "/dicer/maintenance", raw, &list, func(out io.Writer) error {
		return printMaintenance(out, list)
	})
}

// printMaintenance prints, per daemon, how many instances changed and the
// switches now on.
func printMaintenance(out io.Writer, list []diceradmin.MaintenanceStatus) error {
	t := newTable(out)
	fmt.Fprintln(t, "KIND\tDAEMON\tCHANGED\tSELECTORS IN MAINTENANCE")
	for _, m := range list {
		sels := make([]string, 0, len(m.Switches))
		for _, s := range m.Switches {
			if s.From != "" { // set through that Caddy of the fleet (R4e)
				sels = append(sels, s.Selector+" (from "+s.From+")")
			} else {
				sels = append(sels, s.Selector)
			}
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\n", cell(m.Kind), cell(m.Daemon), m.Changed, cell(strings.Join(sels, "; ")))
	}
	return t.Flush()
}
