package caddydicer

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// readmeSyntaxMark, on the line just above a ```caddyfile fence in
// README.md (an HTML comment, so GitHub does not show it), marks a syntax
// summary such as `dynamic dicer [<selector> [<port>]]`: it must be
// `caddy fmt`-clean, but it is not a Caddyfile and is not adapted. Every
// other ```caddyfile snippet of the README must be a whole Caddyfile that
// a user can copy: it must adapt without error and be `caddy fmt`-clean.
// A fragment (a `reverse_proxy` block alone) is written inside a site, or
// marked as syntax.
const readmeSyntaxMark = "<!-- caddyfile: syntax -->"

type readmeSnippet struct {
	line   int // of the opening fence
	syntax bool
	text   string
}

// readmeSnippets returns the ```caddyfile snippets of a Markdown text.
func readmeSnippets(t *testing.T, md string) []readmeSnippet {
	t.Helper()
	var snippets []readmeSnippet
	lines := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```caddyfile" {
			continue
		}
		s := readmeSnippet{line: i + 1, syntax: i > 0 && strings.TrimSpace(lines[i-1]) == readmeSyntaxMark}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("README.md:%d: the caddyfile snippet is not closed", s.line)
		}
		s.text = strings.Join(body, "\n") + "\n"
		snippets = append(snippets, s)
	}
	return snippets
}

// TestReadmeCaddyfiles keeps the README's Caddyfile snippets true: each
// whole Caddyfile adapts, and each snippet is as `caddy fmt` writes it, so
// that a copied one neither fails nor warns "Caddyfile input is not
// formatted".
func TestReadmeCaddyfiles(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := readmeSnippets(t, string(md))
	if len(snippets) == 0 {
		t.Fatal("README.md has no ```caddyfile snippet")
	}
	adapted := 0
	for _, s := range snippets {
		if formatted := caddyfile.Format([]byte(s.text)); !bytes.Equal(formatted, []byte(s.text)) {
			t.Errorf("README.md:%d: the snippet is not caddy fmt-clean; caddy fmt writes it:\n%s", s.line, formatted)
		}
		if s.syntax {
			continue
		}
		adapted++
		if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(s.text), map[string]any{"filename": "README.md"}); err != nil {
			t.Errorf("README.md:%d: the Caddyfile does not adapt (mark a syntax summary with %s): %v", s.line, readmeSyntaxMark, err)
		}
	}
	if adapted == 0 {
		t.Error("no README snippet was adapted: are they all marked as syntax?")
	}
}
