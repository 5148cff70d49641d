package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stateWrite is a call that writes state where it outlives the process:
// a key of Caddy's storage, or a record of a DNS zone.
var stateWrite = regexp.MustCompile(`\.(Store|AppendRecords|SetRecords|DeleteRecords)\(ctx`)

// inMemoryForTests are source files that call Store only on a storage
// in this process's memory, for other packages' tests: nothing outlives
// the process.
var inMemoryForTests = map[string]bool{
	"internal/fleet/statmemory.go": true,
}

// R15: every source file that writes state outside memory is named in the
// state table of docs/state.md, so that no new kind of state arrives
// without its owner, bound and end written down.
func TestState_R15_every_writer_has_a_row(t *testing.T) {
	raw, err := os.ReadFile("docs/state.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "e2e", "bench":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.Contains(p, "test/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if stateWrite.Match(b) && !inMemoryForTests[filepath.ToSlash(p)] && !strings.Contains(page, "`"+filepath.ToSlash(p)+"`") {
			t.Errorf("%s writes state outside memory (storage keys or DNS records) but docs/state.md has no row naming `%s`", p, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// R15: every file the state table names exists, so the table cannot point
// at code that moved.
func TestState_R15_rows_name_files_that_exist(t *testing.T) {
	raw, err := os.ReadFile("docs/state.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`([a-z0-9_/]+\\.go)`").FindAllStringSubmatch(string(raw), -1) {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("docs/state.md names %s, which does not exist", m[1])
		}
	}
}
