package caddydicer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestSwarmCaddyfileAdapt adapts each testdata/caddyfile/swarm/*.caddyfiletest
// (R10), as TestCaddyfileAdapt does the Dicer and Docker ones, compares the
// result with the JSON frozen in the file, and decodes every swarm module
// object of it strictly into its Go type.
func TestSwarmCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "swarm", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/caddyfile/swarm/*.caddyfiletest files")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".caddyfiletest"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfgText, want, ok := strings.Cut(strings.ReplaceAll(string(data), "\r\n", "\n"), cfGoldenSeparator)
			if !ok {
				t.Fatalf("%s: no %q line between the Caddyfile and the JSON", file, strings.TrimSpace(cfGoldenSeparator))
			}
			want = strings.TrimSpace(want)
			if !caddytest.CompareAdapt(t, file, strings.TrimSpace(cfgText)+"\n", "caddyfile", want) {
				t.Errorf("%s: the adapted JSON differs from the golden JSON (diff above)", file)
			}
			if n := swarmModulesDecode(t, []byte(want)); n == 0 {
				t.Errorf(`%s: the golden JSON holds no "source":"swarm" nor "module":"swarm"`, file)
			}
		})
	}
}

// swarmModulesDecode decodes every swarm upstreams source and swarm
// permission in an adapted config strictly into its Go type, as Caddy does
// when it loads the config, and returns how many it found.
func swarmModulesDecode(t *testing.T, adapted []byte) int {
	t.Helper()
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatalf("golden JSON: %v", err)
	}
	found := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				obj, _ := child.(map[string]any)
				switch {
				case k == "dynamic_upstreams" && obj["source"] == "swarm":
					found++
					cfStrictDecode(t, obj, "source", new(SwarmUpstreams))
				case k == "permission" && obj["module"] == "swarm":
					found++
					cfStrictDecode(t, obj, "module", new(SwarmPermission))
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(cfg)
	return found
}
