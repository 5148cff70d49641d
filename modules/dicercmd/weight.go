package dicercmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// weightCommand is `caddy dicer weight`: POST /dicer/weight (R4c).
func weightCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "weight [<selector>] <n|clear> [--instance NAME]",
		Short: "Sets, or clears, the runtime weight of the instances a selector or --instance chooses",
		Long: `Sets the weight of the chosen instances of every daemon followed, for the
dicer_weighted and dicer_sticky policies, from the next request on, with no
config load: n from 0 (a warm spare) to 10000; 'clear' drops it, and their
caddy.weight label (or 1) counts again. A runtime weight lasts until its
instance goes (a recreated container is a new instance) or it is cleared.

  caddy dicer weight app=web,track=canary 10
  caddy dicer weight --instance web-canary 0
  caddy dicer weight app=web clear`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			req, err := weightRequestOf(c, args)
			if err != nil {
				return err
			}
			body, err := json.Marshal(req)
			if err != nil {
				return err
			}
			var list []diceradmin.WeightChange
			return adminCall(c, http.MethodPost, "/dicer/weight", body, &list, func(w io.Writer) error { return printWeights(w, list) })
		},
	}
	c.Flags().String("instance", "", "The instance of this name (with a selector: if it matches)")
	return c
}

// weightRequestOf reads `[<selector>] <n|clear>` and --instance.
func weightRequestOf(c *cobra.Command, args []string) (diceradmin.WeightRequest, error) {
	var req diceradmin.WeightRequest
	req.Instance, _ = c.Flags().GetString("instance")
	value := args[len(args)-1]
	if len(args) == 2 {
		req.Selector = args[0]
	}
	if req.Selector == "" && req.Instance == "" {
		return req, fmt.Errorf("give a selector or --instance NAME, then the weight: caddy dicer weight app=web 5")
	}
	if value == "clear" {
		req.Clear = true
		return req, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return req, fmt.Errorf("weight: %q is neither a number from 0 to 10000 nor 'clear'", value)
	}
	req.Weight = &n
	return req, nil
}

func printWeights(w io.Writer, list []diceradmin.WeightChange) error {
	t := newTable(w)
	fmt.Fprintln(t, "DAEMON\tNAME\tWEIGHT")
	for _, ch := range list {
		weight := weightString(ch.Weight, ch.Runtime)
		if ch.Gone {
			weight = "cleared (instance gone)" // R4e: a fleet's record kept it
		}
		fmt.Fprintf(t, "%s\t%s\t%s\n", cell(ch.Kind+" "+ch.Daemon), cell(ch.Name), weight)
	}
	return t.Flush()
}

// weightCell is an instance's weight in `caddy dicer instances`: the one
// in effect, and, while a runtime weight overrides it, its caddy.weight
// label ("5 (runtime; label 90)"), which takes over again when the runtime
// weight is cleared, and the Caddy of the fleet it was set through ("5
// (runtime from web-2 (id); label 90)", R4e).
func weightCell(in diceradmin.InstanceStatus) string {
	s := weightString(in.Weight, in.RuntimeWeight)
	if in.RuntimeWeight && in.RuntimeWeightFrom != "" {
		s = strings.TrimSuffix(s, ")") + " from " + cell(in.RuntimeWeightFrom) + ")"
	}
	if label := strings.TrimSpace(in.Labels[catalog.LabelWeight]); in.RuntimeWeight && label != "" {
		s = strings.TrimSuffix(s, ")") + "; label " + cell(clipCell(label)) + ")"
	}
	return s
}

// clipCell is s cut to 16 bytes, with "…" when cut: a label in a table
// cell.
func clipCell(s string) string {
	if len(s) <= 16 {
		return s
	}
	return strings.ToValidUTF8(s[:16], "") + "…"
}

func weightString(weight int, runtime bool) string {
	s := strconv.Itoa(weight)
	if runtime {
		s += " (runtime)"
	}
	return s
}
