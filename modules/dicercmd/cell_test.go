package dicercmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// hostile is label text a tenant could set: an OSC sequence that sets the
// terminal's title, a carriage return that rewrites the line, a C1 CSI, a
// bidi override, a tab and a byte that is not UTF-8.
const hostile = "shop\x1b]0;pwned\x07\rOK\u009b2J\u202egnp.exe\tx\xff"

// TestCLITables_EscapeControlCharacters: no table of `caddy dicer` prints a
// control character, whatever the tenant put in a label or a name.
func TestCLITables_EscapeControlCharacters(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	if err := printExplanation(&out, diceradmin.Explanation{
		Host: hostile,
		Routes: []diceradmin.RouteExplanation{{Kind: "docker", Daemon: hostile, Route: "r", Targets: []string{hostile},
			Candidates: []diceradmin.Candidate{{Instance: hostile, Dial: hostile, Why: `caddy.port "` + hostile + `" is not a port`}}}},
		Certificates: []diceradmin.CertificateDecision{{Kind: "docker", Daemon: "d", Why: hostile}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := printInstances(&out, []diceradmin.InstanceStatus{{Kind: "docker", Daemon: hostile, Name: hostile, State: "running", Health: "none", Verdict: hostile,
		Networks: []diceradmin.NetworkStatus{{Network: hostile, Address: "10.0.0.2"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := printDaemons(&out, []diceradmin.DaemonStatus{{Kind: "docker", Address: hostile, State: "following", Since: now, LastError: hostile}}, now); err != nil {
		t.Fatal(err)
	}
	if err := printDNS(&out, []diceradmin.DNSZoneStatus{{Kind: "docker", Daemon: hostile,
		ZoneStatus: dnsrecords.ZoneStatus{Zone: hostile, LastError: hostile, RetryAt: now.Add(time.Minute)}}}, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e", "\xff"} {
		if strings.Contains(text, bad) {
			t.Errorf("the tables print %q raw:\n%q", bad, text)
		}
	}
	// Only the table's own layout: no tab survives tabwriter, each line
	// break is the table's.
	if strings.Contains(text, "\t") {
		t.Errorf("a tab from a cell reached the output: %q", text)
	}
	const want = `shop\x1b]0;pwned\x07\x0dOK\u009b2J\u202egnp.exe\x09x\xff`
	if n := strings.Count(text, want); n < 10 {
		t.Errorf("want the escaped text %s in every cell (10), found %d times:\n%s", want, n, text)
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"":                "",
		"web.example.com": "web.example.com",
		"café ünïcode 日本": "café ünïcode 日本",
		"a\nb":            `a\x0ab`,
		"\x7f":            `\x7f`,
		"\u0085":          `\u0085`,
		"x\u2066y\u2069":  `x\u2066y\u2069`,
		"\xc3":            `\xc3`,
		`back\slash`:      `back\slash`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}
