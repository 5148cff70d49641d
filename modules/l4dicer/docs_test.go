package l4dicer

import (
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile" // the caddyfile adapter
	_ "github.com/mholt/caddy-l4/layer4"                      // the layer4 app and its global option
	_ "github.com/mholt/caddy-l4/modules/l4tls"               // the tls matcher
)

// TestLayer4DocsCaddyfiles adapts the Caddyfiles of docs/layer4.md marked
// `<!-- caddyfile: layer4 -->` (the root package, which has no caddy-l4,
// checks only their format), so that a copied one works.
func TestLayer4DocsCaddyfiles(t *testing.T) {
	md, err := os.ReadFile("../../docs/layer4.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(md), "\n")
	adapted := 0
	for i := 1; i < len(lines); i++ {
		if lines[i] != "```caddyfile" || strings.TrimSpace(lines[i-1]) != "<!-- caddyfile: layer4 -->" {
			continue
		}
		var b strings.Builder
		j := i + 1
		for ; j < len(lines) && lines[j] != "```"; j++ {
			b.WriteString(lines[j] + "\n")
		}
		if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(b.String()), nil); err != nil {
			t.Errorf("docs/layer4.md:%d: the Caddyfile does not adapt: %v", i+1, err)
		}
		adapted++
		i = j
	}
	if adapted == 0 {
		t.Error("docs/layer4.md has no Caddyfile marked <!-- caddyfile: layer4 -->")
	}
}
