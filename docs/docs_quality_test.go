package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repeatMinWords is the length from which a paragraph said twice on one
// page is a copy, not a refrain.
const repeatMinWords = 16

// userPages are the pages a user reads: README.md and docs/*.md.
func userPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

// proseParagraphs returns the page's paragraphs outside code fences and
// tables, each with its first line number, words joined by one space.
func proseParagraphs(md string) (paras []string, lines []int) {
	var cur []string
	start, fence := 0, false
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(strings.Fields(strings.Join(cur, " ")), " "))
			lines = append(lines, start)
		}
		cur = nil
	}
	for i, l := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(l)
		if strings.HasPrefix(trim, "```") {
			fence = !fence
			flush()
			continue
		}
		if fence || strings.HasPrefix(trim, "|") || strings.HasPrefix(trim, "#") {
			flush()
			continue
		}
		if trim == "" {
			flush()
			continue
		}
		if len(cur) == 0 {
			start = i + 1
		}
		cur = append(cur, trim)
	}
	flush()
	return paras, lines
}

// TestDocs_no_paragraph_twice fails when a page says the same paragraph
// (of repeatMinWords words or more) twice: a copy left behind by an edit.
func TestDocs_no_paragraph_twice(t *testing.T) {
	for _, page := range userPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		paras, lines := proseParagraphs(string(md))
		for i, p := range paras {
			if len(strings.Fields(p)) < repeatMinWords {
				continue
			}
			if first, ok := seen[p]; ok {
				t.Errorf("%s:%d repeats the paragraph of line %d: %.60q...", page, lines[i], first, p)
				continue
			}
			seen[p] = lines[i]
		}
	}
}

// TestDocs_no_double_blank_lines keeps the pages' prose tidy: two blank
// lines in a row, outside code, are a leftover.
func TestDocs_no_double_blank_lines(t *testing.T) {
	for _, page := range userPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		fence, blank := false, 0
		for i, l := range strings.Split(string(md), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				fence = !fence
			}
			if fence || strings.TrimSpace(l) != "" {
				blank = 0
				continue
			}
			if blank++; blank == 2 {
				t.Errorf("%s:%d: two blank lines in a row", page, i+1)
			}
		}
	}
}

// TestDocs_no_page_listed_twice keeps docs/index.md an index: each page
// has one row.
func TestDocs_no_page_listed_twice(t *testing.T) {
	md, err := os.ReadFile(docsIndex)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`^\| \[[^\]]+\]\(([^)]+)\)`)
	seen := map[string]int{}
	for i, l := range strings.Split(string(md), "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if first, ok := seen[m[1]]; ok {
			t.Errorf("%s:%d lists %s again (first on line %d)", docsIndex, i+1, m[1], first)
			continue
		}
		seen[m[1]] = i + 1
	}
}

// moduleIDPattern finds the ID a CaddyModule method returns.
var moduleIDPattern = regexp.MustCompile(`(?m)^\s*ID:\s+"([a-z0-9_.]+)",`)

// registeredModuleIDs reads every module ID this repository registers from
// its shipped (non-test) Go files outside internal/ and e2e/.
func registeredModuleIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			// bench holds benchmark tools (bench/floorcaddy's source is
			// built into no plugin).
			case "internal", "e2e", "bin", "example", ".git", "testdata", "bench":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), "caddy.ModuleInfo{") {
			return nil
		}
		for _, m := range moduleIDPattern.FindAllStringSubmatch(string(src), -1) {
			ids = append(ids, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

// TestReadme_modules_table_names_every_module fails when a module the
// repository registers has no row in the README's modules table.
func TestReadme_modules_table_names_every_module(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\|")
	for _, m := range row.FindAllStringSubmatch(string(md), -1) {
		table[m[1]] = true
	}
	ids := registeredModuleIDs(t)
	if len(ids) < 10 {
		t.Fatalf("found only %d registered module IDs (%v): the pattern no longer reads the sources", len(ids), ids)
	}
	for _, id := range ids {
		if !table[id] {
			t.Errorf("module %s is registered but has no row in README.md's modules table", id)
		}
	}
}
