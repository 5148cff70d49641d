package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// CONTRIBUTING.md's layout names every package of the module and every
// non-test Go file of the root package, and its make table every target
// the Makefile documents with `##`, so a new one cannot hide from a
// newcomer.
func TestContributing_layout_names_every_package_file_and_target(t *testing.T) {
	raw, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	for _, dir := range packageDirs(t) {
		if dir != "." && !strings.Contains(page, "`"+dir+"/`") {
			t.Errorf("CONTRIBUTING.md's layout does not name the package %s/ (as `%s/`)", dir, dir)
		}
	}
	roots, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range roots {
		if !strings.HasSuffix(f, "_test.go") && !strings.Contains(page, "`"+f+"`") {
			t.Errorf("CONTRIBUTING.md's layout does not name the root file %s", f)
		}
	}
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([a-z0-9-]+):.*## `).FindAllStringSubmatch(string(mk), -1) {
		if !strings.Contains(page, "`make "+m[1]+"`") {
			t.Errorf("CONTRIBUTING.md's make table lacks `make %s`", m[1])
		}
	}
}

// packageDirs are the folders of the module's packages, relative to the
// root, as `go list` sees them with every build tag the tests use.
func packageDirs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", "e2e", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(wd, dir)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	return dirs
}
