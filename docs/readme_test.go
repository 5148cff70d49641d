package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// readmeSyntaxMark, on the line just above a ```caddyfile fence in
// README.md or a docs/*.md page (an HTML comment, so GitHub does not show
// it), marks a syntax
// summary such as `dynamic dicer [<selector> [<port>]]`: it must be
// `caddy fmt`-clean, but it is not a Caddyfile and is not adapted. Every
// other ```caddyfile snippet of those pages must be a whole Caddyfile that
// a user can copy: it must adapt without error and be `caddy fmt`-clean.
// A fragment (a `reverse_proxy` block alone) is written inside a site, or
// marked as syntax.
const readmeSyntaxMark = "<!-- caddyfile: syntax -->"

// readmeLayer4Mark marks a snippet that needs caddy-l4 to adapt: this
// package checks only its format, package layer4 adapts it
// (TestLayer4DocsCaddyfiles).
const readmeLayer4Mark = "<!-- caddyfile: layer4 -->"

type readmeSnippet struct {
	line   int // of the opening fence
	syntax bool
	text   string
}

// readmeSnippets returns the ```caddyfile snippets of a Markdown text;
// name is the file's, for errors.
func readmeSnippets(t *testing.T, name, md string) []readmeSnippet {
	t.Helper()
	var snippets []readmeSnippet
	lines := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```caddyfile" {
			continue
		}
		s := readmeSnippet{line: i + 1, syntax: i > 0 && (strings.TrimSpace(lines[i-1]) == readmeSyntaxMark || strings.TrimSpace(lines[i-1]) == readmeLayer4Mark)}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: the caddyfile snippet is not closed", name, s.line)
		}
		s.text = strings.Join(body, "\n") + "\n"
		snippets = append(snippets, s)
	}
	return snippets
}

// snippetPages lists the Markdown pages whose Caddyfile snippets are
// checked: README.md and every page of docs/.
func snippetPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/ has no page: is the test run from the repository's root?")
	}
	return append([]string{"README.md"}, docs...)
}

// TestReadmeCaddyfiles keeps the Caddyfile snippets of README.md and of
// every docs/*.md page true: each whole Caddyfile adapts, and each snippet
// is as `caddy fmt` writes it, so that a copied one neither fails nor warns
// "Caddyfile input is not formatted".
func TestReadmeCaddyfiles(t *testing.T) {
	adapted, total := 0, 0
	for _, page := range snippetPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.ToSlash(page)
		snippets := readmeSnippets(t, name, string(md))
		if name == "README.md" && len(snippets) == 0 {
			t.Error("README.md has no ```caddyfile snippet")
		}
		for _, s := range snippets {
			total++
			if formatted := caddyfile.Format([]byte(s.text)); !bytes.Equal(formatted, []byte(s.text)) {
				t.Errorf("%s:%d: the snippet is not caddy fmt-clean; caddy fmt writes it:\n%s", name, s.line, formatted)
			}
			if s.syntax {
				continue
			}
			adapted++
			if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(s.text), map[string]any{"filename": name}); err != nil {
				t.Errorf("%s:%d: the Caddyfile does not adapt (mark a syntax summary with %s): %v", name, s.line, readmeSyntaxMark, err)
			}
		}
	}
	if adapted == 0 {
		t.Error("no snippet was adapted: are they all marked as syntax?")
	}
	t.Logf("%d Caddyfile snippets, %d adapted", total, adapted)
}
