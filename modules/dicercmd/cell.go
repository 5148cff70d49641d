package dicercmd

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// cell is s made safe to print in a terminal: what a tenant controls
// (instance names, label text quoted in a reason, hosts) reaches the
// operator's terminal through the `caddy dicer` tables, and a control
// character there could rewrite lines, set the window title or reorder
// what is shown. Every C0 control (tab and newline included: they would
// also break the table), DEL, every C1 control, the Unicode bidi controls
// and each byte that is not UTF-8 are written as Go escapes (\x1b, \u202e);
// anything else is kept.
func cell(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// cells applies cell to each of ss.
func cells(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = cell(s)
	}
	return out
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || r < 0x20 || r == 0x7f || unsafeRune(r) {
			return true
		}
		i += size
	}
	return false
}

// unsafeRune reports a C1 control or a bidi control: LRM, RLM, ALM, the
// embeddings and overrides (U+202A..U+202E) and the isolates
// (U+2066..U+2069).
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f ||
		r == 0x200e || r == 0x200f || r == 0x061c ||
		r >= 0x202a && r <= 0x202e ||
		r >= 0x2066 && r <= 0x2069
}
