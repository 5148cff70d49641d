package caddydicer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// The modules are looked up by ID, as Caddy does, so that the targets hold
// whatever the Go types are called.
var (
	fuzzUpstreamModules  = []string{"http.reverse_proxy.upstreams.dicer", "http.reverse_proxy.upstreams.docker"}
	fuzzPermissionModule = []string{"tls.permission.dicer", "tls.permission.docker"}
)

// FuzzUpstreamsCaddyfile runs `dynamic dicer ...` and `dynamic docker ...`
// (R10) through each upstream module's UnmarshalCaddyfile; see
// fuzzCaddyfile for what it checks.
func FuzzUpstreamsCaddyfile(f *testing.F) {
	for _, s := range []string{
		"dicer",
		"dicer app=web",
		"dicer app=web 8080",
		`dicer "tier in (frontend,edge)" 65535`,
		"dicer app=web {\n port 1\n}",
		"dicer {\n}",
		"dicer {\n address dicer.example:7443\n token dicer_izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq\n selector !internal\n port 8080\n published_port_host 10.0.0.5\n tls {\n  ca /etc/caddy/dicer-ca.pem\n  server_name dicer.example\n }\n}",
		"dicer {\n address 192.0.2.10:7443\n token dicer_izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq_8b7f3a37a5cc5474ebeaa9e78f6ea463ca321c661ed6eb909dd63fdad31eebbd\n}",
		"dicer {\n address {env.DICER_ADDRESS}\n token {env.DICER_TOKEN}\n}",
		"dicer {\n address 192.0.2.10:7443\n token dicer_short secret\n}",
		"dicer {\n address unix:///a.sock\n address unix:///b.sock\n}",
		"dicer app=web 8080 {\n port 9090\n}",
		"dicer app=web 0",
		"dicer \"app in (\"",
		"docker app=web 8080 {\n network front\n address tcp://192.0.2.10:2376\n tls {\n  ca /ca.pem\n  cert /c.pem\n  key /k.pem\n }\n}",
		"docker {\n network a\n network b\n}",
		"docker {\n tls {\n  cert /c.pem\n }\n}",
		"docker {\n address ftp://x\n}",
		"dicer {\n tls\n}",
		"dicer {\n unknown 1\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { fuzzCaddyfile(t, fuzzUpstreamModules, in) })
}

// FuzzPermissionCaddyfile runs `permission dicer ...` and `permission
// docker ...` (R10) through each permission module's UnmarshalCaddyfile;
// see fuzzCaddyfile for what it checks.
func FuzzPermissionCaddyfile(f *testing.F) {
	for _, s := range []string{
		"dicer",
		"dicer {\n}",
		"dicer extra",
		"dicer {\n address 192.0.2.10:7443\n token dicer_izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq_8b7f3a37a5cc5474ebeaa9e78f6ea463ca321c661ed6eb909dd63fdad31eebbd\n published_port_host 192.0.2.10\n}",
		"dicer {\n address 192.0.2.10:7443\n token dicer_izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq\n tls {\n  server_name dicer.example\n }\n}",
		"dicer {\n token dicer_izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq\n}",
		"dicer {\n selector app=web\n}",
		"dicer {\n address unix-abstract:\n}",
		"docker {\n address unix:///var/run/docker.sock\n published_port_host 10.0.0.5\n}",
		"docker {\n address tcp://192.0.2.10:2376\n tls {\n  ca /ca.pem\n  cert /c.pem\n  key /k.pem\n }\n}",
		"docker {\n network front\n}",
		"docker {\n tls {\n  ca\n }\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { fuzzCaddyfile(t, fuzzPermissionModule, in) })
}

// fuzzErrLine is how caddyfile.Dispenser.Errf ends an error.
var fuzzErrLine = regexp.MustCompile(`, at Testfile:([0-9]+)$`)

// fuzzCaddyfile gives in, as the segment Caddy hands a module (its first
// line and block), to each module's UnmarshalCaddyfile and checks:
//   - it never panics;
//   - an error names the file and a line of the input, and never holds the
//     value of a token setting;
//   - an accepted input's JSON decodes, strictly, into an equal module
//     that encodes to the same JSON, with a port in 1..65535 if any and a
//     selector that parses.
//
// Inputs the Caddyfile lexer refuses are skipped: Caddy reports them before
// any module sees a token. So are those that open with a block: Caddy hands
// a module a segment that starts with the module's name.
func fuzzCaddyfile(t *testing.T, modules []string, in string) {
	tokens, err := caddyfile.Tokenize([]byte(in), "Testfile")
	if err != nil || len(tokens) == 0 || tokens[0].Text == "{" {
		return // a module's segment starts with its name, never with a block
	}
	lines := strings.Count(in, "\n") + 1
	for _, id := range modules {
		info, err := caddy.GetModule(id)
		if err != nil {
			t.Fatal(err)
		}
		mod := info.New()
		d := caddyfile.NewDispenser(tokens).NewFromNextSegment()
		err = mod.(caddyfile.Unmarshaler).UnmarshalCaddyfile(d)
		if err != nil {
			msg := err.Error()
			m := fuzzErrLine.FindStringSubmatch(msg)
			if m == nil {
				t.Fatalf("%s: error %q names no line of the input %q", id, msg, in)
			}
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > lines {
				t.Fatalf("%s: error %q names line %s of an input of %d lines: %q", id, msg, m[1], lines, in)
			}
			if tok := fuzzTokenValue(tokens, in); tok != "" && strings.Contains(msg, tok) {
				t.Fatalf("%s: error %q holds the token %q", id, msg, tok)
			}
			continue
		}
		if !utf8.ValidString(in) {
			// encoding/json writes invalid UTF-8 as U+FFFD, as it does for
			// every Caddy module: nothing to round-trip.
			continue
		}
		data, err := json.Marshal(mod)
		if err != nil {
			t.Fatalf("%s: %q accepted, but its JSON: %v", id, in, err)
		}
		again := info.New()
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(again); err != nil {
			t.Fatalf("%s: %q accepted, but its JSON %s does not decode: %v", id, in, data, err)
		}
		if !reflect.DeepEqual(mod, again) {
			t.Fatalf("%s: %q gives %#v, but its JSON %s decodes to %#v", id, in, mod, data, again)
		}
		if data2, _ := json.Marshal(again); !bytes.Equal(data, data2) {
			t.Fatalf("%s: %q: JSON %s re-encodes as %s", id, in, data, data2)
		}
		var fields struct {
			Selector *string `json:"selector"`
			Port     *int    `json:"port"`
		}
		if err := json.Unmarshal(data, &fields); err != nil {
			t.Fatal(err)
		}
		if fields.Port != nil && (*fields.Port < 1 || *fields.Port > 65535) {
			t.Fatalf("%s: %q accepted with port %d", id, in, *fields.Port)
		}
		if fields.Selector != nil {
			if _, err := selector.Parse(*fields.Selector); err != nil {
				t.Fatalf("%s: %q accepted with a bad selector: %v", id, in, err)
			}
		}
	}
}

// fuzzTokenValue is the value of the first `token <value>` line of the
// input when it is long enough to be a secret (16 characters or more) and
// appears only there in the input, so that no other setting may rightly
// quote it; else "".
func fuzzTokenValue(tokens []caddyfile.Token, in string) string {
	for i := 0; i+1 < len(tokens); i++ {
		if tokens[i].Text != "token" || tokens[i+1].Line != tokens[i].Line {
			continue
		}
		v := tokens[i+1].Text
		if len(v) >= 16 && strings.Count(in, v) == 1 {
			return v
		}
		return ""
	}
	return ""
}
