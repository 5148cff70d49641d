package dockertest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeDocker puts a docker script first on PATH that answers Swarm's
// "update out of sequence" the first refusals times, then ok; it counts
// its runs in the returned file.
func fakeDocker(t *testing.T, refusals int) string {
	t.Helper()
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	script := `#!/bin/sh
echo x >> "` + runs + `"
n=$(wc -l < "` + runs + `")
if [ "$n" -le ` + strconv.Itoa(refusals) + ` ]; then
	echo "Error response from daemon: rpc error: code = Unknown desc = update out of sequence" >&2
	exit 1
fi
echo ok
`
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return runs
}

func runsOf(t *testing.T, runs string) int {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// A service write Swarm refused as stale is made again; after staleTries
// refusals the refusal is the answer.
func TestDocker_retries_a_stale_service_write(t *testing.T) {
	runs := fakeDocker(t, 2)
	out, err := Docker(10*time.Second, "service", "update", "--image", "x", "s")
	if err != nil || strings.TrimSpace(out) != "ok" || runsOf(t, runs) != 3 {
		t.Errorf("two refusals: %q %v after %d runs, want ok after 3", out, err, runsOf(t, runs))
	}
	runs = fakeDocker(t, staleTries)
	out, err = Docker(10*time.Second, "service", "update", "s")
	if err == nil || !strings.Contains(out, "out of sequence") || runsOf(t, runs) != staleTries {
		t.Errorf("refused every time: %q %v after %d runs, want the refusal after %d", out, err, runsOf(t, runs), staleTries)
	}
}
