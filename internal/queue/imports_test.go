package queue

import (
	"os/exec"
	"strings"
	"testing"
)

// The queue knows no Caddy, no catalog: it depends on the standard
// library only (go list -deps), so that what touches Caddy stays in the
// root package's upstreams_queue.go.
func TestQueue_imports_the_standard_library_only(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command for go list -deps: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if first, _, _ := strings.Cut(dep, "/"); strings.Contains(first, ".") && !strings.HasPrefix(dep, "github.com/caddy-dicer/caddy-dicer/internal/queue") {
			t.Errorf("the package depends on %s", dep)
		}
	}
}
