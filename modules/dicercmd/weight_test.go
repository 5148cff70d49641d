package dicercmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

func TestWeightCommand_R4c_arguments(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		instance string
		want     string // the JSON body, or the error's start
	}{
		{[]string{"app=web", "5"}, "", `{"selector":"app=web","weight":5}`},
		{[]string{"0"}, "web-1", `{"instance":"web-1","weight":0}`},
		{[]string{"app=web", "clear"}, "", `{"selector":"app=web","clear":true}`},
		{[]string{"5"}, "", "give a selector or --instance"},
		{[]string{"app=web", "lots"}, "", "weight: \"lots\""},
	} {
		c := weightCommand()
		if tc.instance != "" {
			c.Flags().Set("instance", tc.instance) //nolint:errcheck // a defined flag
		}
		req, err := weightRequestOf(c, tc.args)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			b, _ := json.Marshal(req)
			got = string(b)
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%v --instance %q: %s, want %s", tc.args, tc.instance, got, tc.want)
		}
		if err == nil {
			if _, err := diceradmin.DecodeWeightRequest(strings.NewReader(got)); err != nil {
				t.Errorf("%s: the admin API refuses it: %v", got, err)
			}
		}
	}
}

func TestWeightCommand_R4c_tables(t *testing.T) {
	var out bytes.Buffer
	if err := printWeights(&out, []diceradmin.WeightChange{{Kind: "docker", Daemon: "unix:///var/run/docker.sock",
		Name: "web-1", Weight: 0, Runtime: true}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "web-1") || !strings.Contains(out.String(), "0 (runtime)") {
		t.Errorf("printWeights:\n%s", out.String())
	}
	out.Reset()
	if err := printInstances(&out, []diceradmin.InstanceStatus{{Kind: "dicer", Daemon: "unix:/d.sock",
		Name: "web-2", Weight: 90, Verdict: "routable"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "WEIGHT") || !strings.Contains(out.String(), " 90 ") {
		t.Errorf("printInstances:\n%s", out.String())
	}
	// A runtime weight shows the label it overrides, escaped and clipped.
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"caddy.weight": "90"}, " 5 (runtime; label 90) "},
		{nil, " 5 (runtime) "},
		{map[string]string{"caddy.weight": "9\x1b[2J0123456789abcdef"}, ` 5 (runtime; label 9\x1b[2J0123456789a…) `},
	} {
		out.Reset()
		if err := printInstances(&out, []diceradmin.InstanceStatus{{Kind: "dicer", Daemon: "unix:/d.sock", Name: "web-2", Weight: 5, RuntimeWeight: true, Labels: tc.labels, Verdict: "routable"}}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("labels %q: printInstances:\n%s\nwant %q in it", tc.labels, out.String(), tc.want)
		}
	}
}
