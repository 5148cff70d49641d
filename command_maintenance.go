package caddydicer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// maintenanceCommand is `caddy dicer maintenance SELECTOR on|off [MESSAGE]`
// (R5i): POST /dicer/maintenance on the admin endpoint the flags name.
func maintenanceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "maintenance SELECTOR on|off [MESSAGE]",
		Short: "Puts the instances SELECTOR matches in maintenance (503 with the maintenance page) or takes them out",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(c *cobra.Command, args []string) error {
			req := MaintenanceRequest{Selector: args[0]}
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
func postMaintenance(cmd *cobra.Command, req MaintenanceRequest) error {
	flags := cmd.Flags()
	address, _ := flags.GetString("address")
	config, _ := flags.GetString("config")
	adapter, _ := flags.GetString("adapter")
	asJSON, _ := flags.GetBool("json")
	admin, err := caddycmd.DetermineAdminAPIAddress(address, nil, config, adapter)
	if err != nil {
		return fmt.Errorf("finding the admin API: %w", err)
	}
	raw, _ := json.Marshal(req)
	resp, err := caddycmd.AdminAPIRequest(admin, http.MethodPost, "/dicer/maintenance",
		http.Header{"Content-Type": {"application/json"}}, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("asking Caddy's admin API at %s: %w", admin, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		_, err := out.Write(body)
		return err
	}
	var list []MaintenanceStatus
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("decoding the answer: %w (is the plugin in that Caddy?)", err)
	}
	t := newTable(out)
	fmt.Fprintln(t, "KIND\tDAEMON\tCHANGED\tSELECTORS IN MAINTENANCE")
	for _, m := range list {
		sels := make([]string, 0, len(m.Switches))
		for _, s := range m.Switches {
			sels = append(sels, s.Selector)
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\n", cell(m.Kind), cell(m.Daemon), m.Changed, cell(strings.Join(sels, "; ")))
	}
	return t.Flush()
}
