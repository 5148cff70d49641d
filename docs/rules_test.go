package docs_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// ruleCite finds a rule number as the code and the docs cite it: R1 to R12,
// a letter for a project rule, a dot for a sub-point. The character before
// must not be a letter, digit or underscore and the token must end at a
// word boundary, so identifiers (XR1, R1_x) are not taken for rules.
var ruleCite = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])(R(?:1[0-2]|[1-9])[a-z]?(?:\.[0-9]+)?)\b`)

// ruleHeading is a heading of docs/rules.md that defines a rule: the rule
// number first, as in "### R2a — wildcards".
var ruleHeading = regexp.MustCompile(`^#{1,6}\s+(R(?:1[0-2]|[1-9])[a-z]?(?:\.[0-9]+)?)\b`)

// ruleSources lists the files whose rule citations must be defined: every
// .go file of the repository (but .git and bin) and the Markdown pages.
func ruleSources(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == ".git" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md", filepath.Join("e2e", "README.md"))
	return append(files, docs...)
}

// TestRules_every_cited_rule_is_defined keeps docs/rules.md the one page
// that defines the rules: each rule number cited in the code, README.md,
// e2e/README.md or docs/ has a heading there, and no rule has two.
func TestRules_every_cited_rule_is_defined(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]int{} // rule -> line of its heading
	fence := false
	for i, line := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		m := ruleHeading.FindStringSubmatch(line)
		if fence || m == nil {
			continue
		}
		if first, dup := defined[m[1]]; dup {
			t.Errorf("docs/rules.md:%d: %s has a second heading (the first is at line %d)", i+1, m[1], first)
			continue
		}
		defined[m[1]] = i + 1
	}
	if len(defined) == 0 {
		t.Fatal("docs/rules.md defines no rule (a heading such as \"### R2a — wildcards\")")
	}

	cited := map[string]bool{}
	for _, path := range ruleSources(t) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
		for n := 1; sc.Scan(); n++ {
			for _, m := range ruleCite.FindAllStringSubmatch(sc.Text(), -1) {
				rule := m[1]
				cited[rule] = true
				if _, ok := defined[rule]; !ok {
					t.Errorf("%s:%d: cites %s, which docs/rules.md does not define", filepath.ToSlash(path), n, rule)
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		f.Close()
	}
	if len(cited) == 0 {
		t.Fatal("no rule is cited anywhere: is the test run from the repository's root?")
	}
	var rules []string
	for r := range cited {
		rules = append(rules, r)
	}
	sort.Strings(rules)
	t.Logf("%d rules cited, %d defined: %s", len(cited), len(defined), strings.Join(rules, " "))
}

// citedTest is a test the rules page names, in backticks: `TestX` or
// `FuzzX`.
var citedTest = regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")

// testFunc is the declaration of a test or fuzz function in a _test.go file.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)

// repositoryTests returns the names of every test and fuzz function in the
// repository's *_test.go files (every package, e2e and build-tagged files
// included; .git and bin skipped).
func repositoryTests(t *testing.T) map[string]bool {
	t.Helper()
	tests := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == ".git" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			tests[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tests
}

// TestRules_cited_tests_exist keeps the Tests: lines of docs/rules.md true:
// every test the page names exists in a *_test.go file, so renaming or
// removing a test breaks this test until the page follows; and every
// numbered rule names at least one test.
func TestRules_cited_tests_exist(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	tests := repositoryTests(t)
	if len(tests) == 0 {
		t.Fatal("no test function found: is the test run from the repository's root?")
	}
	rule, fence, cites := "", false, 0
	withTests := map[string]bool{}
	var rules []string
	for i, line := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence {
			continue
		}
		if m := ruleHeading.FindStringSubmatch(line); m != nil {
			rule = m[1]
			rules = append(rules, rule)
		} else if strings.HasPrefix(line, "#") {
			rule = ""
		}
		for _, m := range citedTest.FindAllStringSubmatch(line, -1) {
			cites++
			if !tests[m[1]] {
				t.Errorf("docs/rules.md:%d: names %s, which no *_test.go file declares (renamed or removed?)", i+1, m[1])
			}
			if rule != "" && strings.HasPrefix(line, "Tests:") {
				withTests[rule] = true
			}
		}
	}
	if cites == 0 {
		t.Fatal("docs/rules.md names no test")
	}
	for _, r := range rules {
		if !withTests[r] {
			t.Errorf("docs/rules.md: %s has no Tests: line naming a test that checks it", r)
		}
	}
}
