package docs_test

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is the README's budget: what a newcomer needs, and an
// index of docs/ for the rest.
const readmeMaxLines = 300

// docsIndex is the page that lists every page of docs/, with README.md.
var docsIndex = filepath.Join("docs", "index.md")

// TestDocs_readme_is_short keeps README.md within its budget.
func TestDocs_readme_is_short(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(md), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into a page of docs/ and link it", n, readmeMaxLines)
	}
}

// TestDocs_every_page_is_in_the_index keeps every page of docs/ reachable:
// each is linked from README.md or docs/index.md, and the index from the
// README.
func TestDocs_every_page_is_in_the_index(t *testing.T) {
	linked := map[string]bool{} // repository-relative paths, slash-separated
	for _, from := range []string{"README.md", docsIndex} {
		for _, l := range markdownLinks(t, from) {
			if target, _, local := resolveLink(from, l.target); local {
				linked[target] = true
			}
		}
	}
	if !linked["docs/index.md"] {
		t.Error("README.md does not link docs/index.md")
	}
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if p := filepath.ToSlash(p); p != "docs/index.md" && !linked[p] {
			t.Errorf("%s is linked from neither README.md nor docs/index.md", p)
		}
	}
}

// TestDocs_relative_links_resolve keeps the links of README.md,
// e2e/README.md and docs/*.md true: each relative link names a file or
// folder of the repository, and its #anchor, if any, a heading of the
// Markdown page it names (as GitHub spells heading anchors).
func TestDocs_relative_links_resolve(t *testing.T) {
	pages := append([]string{"README.md", filepath.Join("e2e", "README.md")}, snippetPages(t)[1:]...)
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, from := range pages {
		for _, l := range markdownLinks(t, from) {
			target, anchor, local := resolveLink(from, l.target)
			if !local {
				continue
			}
			checked++
			where := filepath.ToSlash(from) + ":" + strconv.Itoa(l.line)
			if _, err := os.Stat(filepath.FromSlash(target)); err != nil {
				t.Errorf("%s: the link %q names %s, which does not exist", where, l.target, target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if anchors[target] == nil {
				anchors[target] = headingAnchors(t, target)
			}
			if !anchors[target][anchor] {
				t.Errorf("%s: the link %q names the anchor #%s, which no heading of %s makes", where, l.target, anchor, target)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: is the test run from the repository's root?")
	}
}

// mdLink is a Markdown link's target and the line it is on.
type mdLink struct {
	target string
	line   int
}

var (
	// inlineLink is a Markdown inline link or image: [text](target) or
	// [text](target "title").
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan is an inline code span, whose text is no link.
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the inline links of a Markdown file, outside code
// fences and code spans.
func markdownLinks(t *testing.T, file string) []mdLink {
	t.Helper()
	md, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var links []mdLink
	fence := false
	for i, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			links = append(links, mdLink{target: m[1], line: i + 1})
		}
	}
	return links
}

// resolveLink resolves a link of the page from to a repository-relative,
// slash-separated path and an anchor; local is false for a link with a
// scheme (https:, mailto:) or an absolute path.
func resolveLink(from, target string) (file, anchor string, local bool) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "/") {
		return "", "", false
	}
	file, anchor, _ = strings.Cut(target, "#")
	if file == "" {
		return filepath.ToSlash(from), anchor, true
	}
	return path.Clean(path.Join(path.Dir(filepath.ToSlash(from)), file)), anchor, true
}

// headingAnchors returns the anchors GitHub makes for the headings of a
// Markdown file: the heading's text without its Markdown, lower case, each
// character other than a letter, a digit, a space, - or _ dropped, spaces
// made -; a repeated anchor gets -1, -2, ...
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	md, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		text, ok := strings.CutPrefix(line, "#")
		if fence || !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		a := headingAnchor(text)
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// markdownLinkText is a link inside a heading, whose anchor keeps its
// text only.
var markdownLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// headingAnchor is GitHub's anchor for a heading's text.
func headingAnchor(text string) string {
	text = markdownLinkText.ReplaceAllString(strings.TrimSpace(text), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocs_heading_anchor pins the anchor spelling the link test relies on
// to GitHub's, on headings of these pages.
func TestDocs_heading_anchor(t *testing.T) {
	for text, want := range map[string]string{
		"R2a — wildcards":                                "r2a--wildcards",
		"R5.1 — a just-woken instance first":             "r51--a-just-woken-instance-first",
		"R2c — size of `caddy.host`":                     "r2c--size-of-caddyhost",
		"`dynamic dicer`: upstreams from a Dicer daemon": "dynamic-dicer-upstreams-from-a-dicer-daemon",
		"Quick start with Docker":                        "quick-start-with-docker",
		"R1c — a resumed container's health":             "r1c--a-resumed-containers-health",
	} {
		if got := headingAnchor(text); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", text, got, want)
		}
	}
}
