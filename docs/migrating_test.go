package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// migratingMark, on the line above a ```yaml fence of docs/migrating.md,
// says what the Compose file is: `before NAME` and `after NAME` are a
// pair, `refused NAME LABEL` one whose labels are refused for LABEL.
var migratingMark = regexp.MustCompile(`^<!-- labels: (before|after|refused) (\S+)(?: (\S+))? -->$`)

// composeLabels reads the labels of each service of a Compose file as
// the page writes them (`labels:` as a map, one `key: value` a line),
// quotes dropped and `$$` read as `$`, as Compose does.
func composeLabels(t *testing.T, yaml string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	var svc string
	inLabels := false
	for _, line := range strings.Split(yaml, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		text := strings.TrimSpace(line)
		switch {
		case text == "" || text == "services:":
		case indent == 2:
			svc, inLabels = strings.TrimSuffix(text, ":"), false
			out[svc] = map[string]string{}
		case indent == 4:
			inLabels = text == "labels:"
		case indent == 6 && inLabels:
			k, v, ok := strings.Cut(text, ": ")
			if !ok {
				t.Fatalf("label line %q", line)
			}
			v = strings.ReplaceAll(strings.Trim(v, `"`), "$$", "$")
			out[svc][k] = v
		}
	}
	return out
}

// TestMigrating_R2f_before_and_after checks every Compose pair of
// docs/migrating.md: the labels before, read under every label set,
// route as the labels after (caddy.host, caddy.path, caddy.strip_path,
// caddy.port, caddy.network); a refused one is refused for the label the page says;
// Sablier's after labels carry what its before ones asked.
func TestMigrating_R2f_before_and_after(t *testing.T) {
	data, err := os.ReadFile("docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	type block struct{ kind, name, label, yaml string }
	var blocks []block
	for i := 0; i < len(lines)-1; i++ {
		m := migratingMark.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if strings.TrimSpace(lines[i+1]) != "```yaml" {
			t.Fatalf("migrating.md:%d: the mark is not above a ```yaml fence", i+1)
		}
		var body []string
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		blocks = append(blocks, block{m[1], m[2], m[3], strings.Join(body, "\n")})
	}
	if len(blocks) < 7 {
		t.Fatalf("%d marked Compose files, want the page's 7 or more", len(blocks))
	}
	all := foreignlabels.SetCaddyDicer | foreignlabels.SetCaddyDockerProxy | foreignlabels.SetTraefik
	routing := []string{catalog.LabelHost, catalog.LabelPath, catalog.LabelStripPath, catalog.LabelPort, catalog.LabelNetwork}
	before := map[string]map[string]map[string]string{}
	for _, b := range blocks {
		svcs := composeLabels(t, b.yaml)
		switch b.kind {
		case "before":
			before[b.name] = svcs
		case "refused":
			for name, labels := range svcs {
				out := foreignlabels.Apply(all, labels)
				if why := out[catalog.LabelRefused]; !strings.Contains(why, `"`+b.label+`"`) {
					t.Errorf("%s/%s: refusal %q, want one for %s", b.name, name, why, b.label)
				}
			}
		case "after":
			was, ok := before[b.name]
			if !ok {
				t.Fatalf("%s: an after without a before", b.name)
			}
			for name, after := range svcs {
				if b.name == "sablier" {
					sablier(t, name, was[name], after)
					continue
				}
				got := foreignlabels.Apply(all, was[name])
				if why, refused := got[catalog.LabelRefused]; refused {
					t.Errorf("%s/%s: refused: %s", b.name, name, why)
				}
				for _, k := range routing {
					if got[k] != after[k] {
						t.Errorf("%s/%s: %s is %q read from the labels before, %q after", b.name, name, k, got[k], after[k])
					}
				}
			}
		}
	}
}

// sablier checks one service of the Sablier pair: scale to zero where
// Sablier had it, and the group as caddy.depends_on's selector.
func sablier(t *testing.T, name string, before, after map[string]string) {
	t.Helper()
	if before["sablier.enable"] == "true" && after[catalog.LabelStandbyAfter] == "" {
		t.Errorf("sablier/%s: no caddy.standby_after", name)
	}
	if dep, ok := after[catalog.LabelDependsOn]; ok && dep != "sablier.group="+before["sablier.group"] {
		t.Errorf("sablier/%s: caddy.depends_on %q does not select the group %q", name, dep, before["sablier.group"])
	}
	if out := foreignlabels.Apply(foreignlabels.SetCaddyDicer|foreignlabels.SetCaddyDockerProxy|foreignlabels.SetTraefik, after); out[catalog.LabelRefused] != "" {
		t.Errorf("sablier/%s: the labels after are refused: %s", name, out[catalog.LabelRefused])
	}
}
