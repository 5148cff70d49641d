package selector

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.sel)
	}
	for _, tc := range parseErrorCases {
		f.Add(tc.sel)
	}
	for _, tc := range stringCases {
		f.Add(tc.sel)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sel, err := Parse(in)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): error %T %v is not a *SyntaxError", in, err, err)
			}
			if se.Offset < 0 || se.Offset > len(in) {
				t.Fatalf("Parse(%q): Offset %d out of range [0, %d]", in, se.Offset, len(in))
			}
			if se.Selector != in {
				t.Fatalf("Parse(%q): SyntaxError.Selector = %q", in, se.Selector)
			}
			if se.Msg == "" || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Parse(%q): bad error message %q", in, err.Error())
			}
			return
		}

		canon := sel.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) succeeded but its String %q does not parse: %v", in, canon, err)
		}
		if s := again.String(); s != canon {
			t.Fatalf("Parse(%q): String %q reparses to String %q", in, canon, s)
		}
		if !reflect.DeepEqual(again, sel) {
			t.Fatalf("Parse(%q) = %#v, but Parse(%q) = %#v", in, sel, canon, again)
		}
		if sel.Empty() != (strings.TrimSpace(in) == "") {
			t.Fatalf("Parse(%q).Empty() = %v", in, sel.Empty())
		}
		for _, l := range fuzzLabels(sel) {
			a, b := sel.Matches(l), again.Matches(l)
			if a != b {
				t.Fatalf("Parse(%q).Matches(%v) = %v, but Parse(%q).Matches = %v", in, l, a, canon, b)
			}
			if want := oracle(sel, l); a != want {
				t.Fatalf("Parse(%q).Matches(%v) = %v, want %v", in, l, a, want)
			}
		}
	})
}

// fuzzLabels returns a few label sets that exercise the requirements of sel:
// none, then every key set to each value the selector mentions, to the empty
// value and to a value it does not mention.
func fuzzLabels(sel Selector) []map[string]string {
	sets := []map[string]string{nil, {}}
	var vals []string
	for _, r := range sel.reqs {
		vals = append(vals, r.value)
		vals = append(vals, r.set...)
	}
	vals = append(vals, "", "\x00unmentioned")
	for _, v := range vals {
		all := map[string]string{}
		for _, r := range sel.reqs {
			all[r.key] = v
			sets = append(sets, map[string]string{r.key: v})
		}
		sets = append(sets, all)
	}
	return sets
}

// oracle evaluates sel on labels the slow, obvious way.
func oracle(sel Selector, labels map[string]string) bool {
	for _, r := range sel.reqs {
		v, ok := labels[r.key]
		in := false
		for _, s := range r.set {
			in = in || s == v
		}
		var holds bool
		switch r.op {
		case opEquals:
			holds = ok && v == r.value
		case opNotEquals:
			holds = !ok || v != r.value
		case opIn:
			holds = ok && in
		case opNotIn:
			holds = !ok || !in
		case opExists:
			holds = ok
		case opNotExists:
			holds = !ok
		default:
			return false
		}
		if !holds {
			return false
		}
	}
	return true
}
