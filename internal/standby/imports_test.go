package standby

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// caddyModule is the import path prefix of Caddy and its modules;
// dockerClient that of the Docker client.
const (
	caddyModule  = "github.com/caddyserver/"
	dockerClient = "github.com/docker/docker/"
)

// The engine knows the catalog, not Caddy nor the Docker client: no file
// of the package imports either, and neither does anything it depends on
// (go list -deps), so that what touches Caddy stays in the root package's
// standby_caddy.go and what knows the Docker client's errors in its
// Actions (the root's dockerActions).
func TestStandby_imports_no_caddy(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, caddyModule) || strings.HasPrefix(path, dockerClient) {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command for go list -deps: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, caddyModule) || strings.HasPrefix(dep, dockerClient) {
			t.Errorf("the package depends on %s", dep)
		}
	}
}
