package testkit

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// ReadFile is the text of the file at path, "" if there is none yet (a log
// Caddy has not written to). Any other error fails t.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// LogLines returns the lines of the log file at path holding every one of
// parts.
//
//	testkit.LogLines(t, logFile, `"instance joins rotation"`, `"instance":"web-1"`)
func LogLines(t testing.TB, path string, parts ...string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(ReadFile(t, path), "\n") {
		if line != "" && containsAll(line, parts) {
			out = append(out, line)
		}
	}
	return out
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// LogEntries decodes a JSON log file (Caddy's `format json`), one object
// per line; lines that are not JSON objects are left out, and a file that
// cannot be opened has no entries.
func LogEntries(path string) []map[string]any {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e map[string]any
		if json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}
