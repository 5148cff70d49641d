package catalog

import (
	"slices"
	"strings"

	"go.uber.org/zap"
)

// The label lint (R13c): a label key that is not one caddy-dicer knows
// but is a near miss of one (`caddy.hots`, `caddy.hosts`, `cady.port`) is
// most likely a typo, which would otherwise be silently ignored. A key
// under `caddy.` that names a Caddyfile directive or is simply far from
// every known key is left alone: caddy-docker-proxy users carry
// `caddy.reverse_proxy`, `caddy.root`, `caddy.tls` and the like on the
// same containers.

// LabelTypo is a label key that looks like a misspelt known label.
type LabelTypo struct {
	// Key is the label key as the instance has it, at most two bytes
	// longer than a known key (escape it where a person reads it).
	Key string
	// Suggest is the known label key closest to Key.
	Suggest string
}

// String is the warning a person reads: `caddy.hots: did you mean
// caddy.host?`.
func (t LabelTypo) String() string {
	return "label " + t.Key + " is not one caddy-dicer knows: did you mean " + t.Suggest + "?"
}

// maxTypos bounds the typos reported for one instance; maxLintKey bounds
// the keys compared at all (no known key is near that long, so a longer
// one is no typo of one): the lint costs at most one length check per
// label and, for keys of a near length, a few hundred byte comparisons.
const (
	maxTypos   = 8
	maxLintKey = 40
)

// directives are Caddyfile directives and caddy-docker-proxy keys that
// may follow `caddy.` on a container and are never a typo of ours, even
// when near one (caddy.root and caddy.port).
var directives = []string{
	"abort", "acme_server", "basic_auth", "basicauth", "bind", "encode", "error", "file_server", "forward_auth",
	"handle", "handle_errors", "handle_path", "header", "import", "intercept", "invoke", "log", "log_append",
	"log_skip", "map", "method", "metrics", "php_fastcgi", "push", "redir", "request_body", "request_header",
	"respond", "reverse_proxy", "rewrite", "root", "route", "skip_log", "templates", "tls", "tracing",
	"try_files", "uri", "vars", "copy_response", "copy_response_headers", "fs", "log_name",
}

// LabelTypos returns the label keys of labels that are near misses of a
// known label (KnownLabels), each with the closest one, in key order; at
// most maxTypos.
func LabelTypos(labels map[string]string) []LabelTypo {
	var out []LabelTypo
	for key := range labels {
		if suggest := typoOf(key); suggest != "" {
			out = append(out, LabelTypo{Key: key, Suggest: suggest})
		}
	}
	slices.SortFunc(out, func(a, b LabelTypo) int { return strings.Compare(a.Key, b.Key) })
	if len(out) > maxTypos {
		out = out[:maxTypos]
	}
	return out
}

// typoOf returns the known label key that key is a typo of, or "".
func typoOf(key string) string {
	if len(key) > maxLintKey || slices.Contains(KnownLabels, key) || strings.HasPrefix(key, "caddy_") || key == "caddy" {
		return ""
	}
	if rest, ok := strings.CutPrefix(key, "caddy."); ok {
		first, _, _ := strings.Cut(rest, ".")
		if slices.Contains(directives, first) || strings.HasPrefix(first, "@") {
			return ""
		}
	}
	best, bestD := "", 3
	for _, known := range KnownLabels {
		allowed := 1
		if len(known) >= 13 { // caddy.network, caddy.standby_after: two edits
			allowed = 2
		}
		d := len(key) - len(known)
		if d < -allowed || d > allowed {
			continue
		}
		if d = distance(key, known, allowed); d <= allowed && d < bestD {
			best, bestD = known, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b (edits:
// insert, delete, substitute a byte, swap two adjacent bytes), or
// more than limit when it is more. a and b are at most maxLintKey bytes.
func distance(a, b string, limit int) int {
	var rows [3][maxLintKey + 1]int
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// warnTypos warns once per instance about its misspelt label keys: when
// it first appears, and again only when its typos change.
func (c *Catalog) warnTypos(old, e *entry) {
	typos := LabelTypos(e.inst.Labels)
	if len(typos) == 0 || old != nil && slices.Equal(typos, LabelTypos(old.inst.Labels)) {
		return
	}
	for _, t := range typos {
		c.logger.Warn("instance label is not one caddy-dicer knows: did you mean "+t.Suggest+"?",
			zap.String("instance", e.inst.Name), zap.String("label", t.Key), zap.String("suggest", t.Suggest))
	}
}
