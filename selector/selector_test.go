package selector

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type labels = map[string]string

// matchCases covers every row of the R8 table, positive and negative, plus
// the AND of several requirements and the edge cases of the syntax.
var matchCases = []struct {
	name   string
	sel    string
	labels labels
	want   bool
}{
	// key=value, key==value
	{"R8_equals_matches_same_value", "app=web", labels{"app": "web"}, true},
	{"R8_equals_rejects_other_value", "app=web", labels{"app": "api"}, false},
	{"R8_equals_rejects_missing_label", "app=web", labels{"tier": "web"}, false},
	{"R8_equals_rejects_nil_labels", "app=web", nil, false},
	{"R8_double_equals_matches_same_value", "app==web", labels{"app": "web"}, true},
	{"R8_double_equals_rejects_other_value", "app==web", labels{"app": "webs"}, false},
	{"R8_equals_is_case_sensitive", "app=web", labels{"app": "Web"}, false},
	{"R8_equals_empty_value_matches_empty_label", "app=", labels{"app": ""}, true},
	{"R8_equals_empty_value_rejects_nonempty_label", "app=", labels{"app": "web"}, false},
	{"R8_equals_empty_value_rejects_missing_label", "app=", labels{}, false},
	{"R8_double_equals_empty_value_matches_empty_label", "app==", labels{"app": ""}, true},

	// key!=value
	{"R8_not_equals_matches_other_value", "tier!=canary", labels{"tier": "stable"}, true},
	{"R8_not_equals_rejects_same_value", "tier!=canary", labels{"tier": "canary"}, false},
	{"R8_not_equals_matches_missing_label", "tier!=canary", labels{"app": "web"}, true},
	{"R8_not_equals_matches_nil_labels", "tier!=canary", nil, true},
	{"R8_not_equals_empty_value_matches_nonempty_label", "app!=", labels{"app": "web"}, true},
	{"R8_not_equals_empty_value_matches_missing_label", "app!=", labels{}, true},
	{"R8_not_equals_empty_value_rejects_empty_label", "app!=", labels{"app": ""}, false},

	// key in (values)
	{"R8_in_matches_listed_value", "tier in (frontend,edge)", labels{"tier": "edge"}, true},
	{"R8_in_matches_first_listed_value", "tier in (frontend,edge)", labels{"tier": "frontend"}, true},
	{"R8_in_rejects_unlisted_value", "tier in (frontend,edge)", labels{"tier": "backend"}, false},
	{"R8_in_rejects_empty_value", "tier in (frontend,edge)", labels{"tier": ""}, false},
	{"R8_in_rejects_missing_label", "tier in (frontend,edge)", labels{"app": "edge"}, false},
	{"R8_in_single_value", "tier in (edge)", labels{"tier": "edge"}, true},
	{"R8_in_many_values", "n in (a,b,c,d,e,f,g,h,i,j,k)", labels{"n": "h"}, true},
	{"R8_in_many_values_unlisted", "n in (a,b,c,d,e,f,g,h,i,j,k)", labels{"n": "hh"}, false},

	// key notin (values)
	{"R8_notin_matches_unlisted_value", "tier notin (canary)", labels{"tier": "stable"}, true},
	{"R8_notin_rejects_listed_value", "tier notin (canary)", labels{"tier": "canary"}, false},
	{"R8_notin_rejects_any_listed_value", "tier notin (canary,beta)", labels{"tier": "beta"}, false},
	{"R8_notin_matches_missing_label", "tier notin (canary)", labels{"app": "web"}, true},
	{"R8_notin_matches_nil_labels", "tier notin (canary)", nil, true},

	// key
	{"R8_exists_matches_any_value", "public", labels{"public": "yes"}, true},
	{"R8_exists_matches_empty_value", "public", labels{"public": ""}, true},
	{"R8_exists_rejects_missing_label", "public", labels{"private": "yes"}, false},
	{"R8_exists_rejects_nil_labels", "public", nil, false},

	// !key
	{"R8_not_exists_matches_missing_label", "!internal", labels{"app": "web"}, true},
	{"R8_not_exists_matches_nil_labels", "!internal", nil, true},
	{"R8_not_exists_rejects_present_label", "!internal", labels{"internal": "true"}, false},
	{"R8_not_exists_rejects_empty_label", "!internal", labels{"internal": ""}, false},

	// comma = AND
	{
		"R8_and_matches_when_all_hold", "app=web,tier!=canary,tier in (edge,frontend),public,!internal",
		labels{"app": "web", "tier": "edge", "public": ""},
		true,
	},
	{
		"R8_and_rejects_when_equals_fails", "app=web,tier!=canary,tier in (edge,frontend),public,!internal",
		labels{"app": "api", "tier": "edge", "public": ""},
		false,
	},
	{
		"R8_and_rejects_when_in_fails", "app=web,tier!=canary,tier in (edge,frontend),public,!internal",
		labels{"app": "web", "tier": "backend", "public": ""},
		false,
	},
	{
		"R8_and_rejects_when_exists_fails", "app=web,tier!=canary,tier in (edge,frontend),public,!internal",
		labels{"app": "web", "tier": "edge"},
		false,
	},
	{
		"R8_and_rejects_when_not_exists_fails", "app=web,tier!=canary,tier in (edge,frontend),public,!internal",
		labels{"app": "web", "tier": "edge", "public": "", "internal": "x"},
		false,
	},
	{"R8_and_contradiction_never_matches", "app=web,app=api", labels{"app": "web"}, false},
	{"R8_and_notin_with_exists", "tier,tier notin (canary)", labels{}, false},

	// the empty selector
	{"R8_empty_selector_matches_anything", "", labels{"app": "web"}, true},
	{"R8_empty_selector_matches_nil_labels", "", nil, true},
	{"R8_blank_selector_matches_anything", " \t\n", labels{"a": "b"}, true},

	// whitespace and syntax details
	{"R8_whitespace_around_tokens", "  app = web ,  tier in ( a , b ) , ! internal ", labels{"app": "web", "tier": "b"}, true},
	{"R8_whitespace_around_equals_empty_value", "app = , b", labels{"app": "", "b": "1"}, true},
	{"R8_in_without_space_before_paren", "tier in(a,b)", labels{"tier": "a"}, true},
	{"R8_notin_without_space_before_paren", "tier notin(a,b)", labels{"tier": "a"}, false},
	{"R8_unicode_whitespace", "app\u00a0=\u2003web", labels{"app": "web"}, true},
	{"R8_keyword_as_key_exists", "in", labels{"in": ""}, true},
	{"R8_keyword_as_key_of_in", "in in (notin)", labels{"in": "notin"}, true},
	{"R8_keyword_as_key_of_notin", "notin notin (in)", labels{"notin": "x"}, true},
	{
		"R8_dotted_and_slashed_keys", "caddy.host=example.com,example.com/team in (a-b_c)",
		labels{"caddy.host": "example.com", "example.com/team": "a-b_c"},
		true,
	},
	{"R8_duplicate_in_values", "tier in (a,a,b)", labels{"tier": "b"}, true},
}

func TestMatches(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Parse(tc.sel)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.sel, err)
			}
			if got := sel.Matches(tc.labels); got != tc.want {
				t.Errorf("Parse(%q).Matches(%v) = %v, want %v", tc.sel, tc.labels, got, tc.want)
			}
			// The canonical form selects the same instances.
			again := MustParse(sel.String())
			if got := again.Matches(tc.labels); got != tc.want {
				t.Errorf("Parse(%q).Matches(%v) = %v, want %v", sel.String(), tc.labels, got, tc.want)
			}
		})
	}
}

func TestZeroSelector(t *testing.T) {
	var sel Selector
	if !sel.Empty() {
		t.Error("zero Selector: Empty() = false")
	}
	if !sel.Matches(nil) || !sel.Matches(labels{"a": "b"}) {
		t.Error("zero Selector does not match everything")
	}
	if s := sel.String(); s != "" {
		t.Errorf("zero Selector: String() = %q", s)
	}
	for _, in := range []string{"", " ", "\t\r\n "} {
		got, err := Parse(in)
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
		if !reflect.DeepEqual(got, Selector{}) {
			t.Errorf("Parse(%q) = %#v, want the zero Selector", in, got)
		}
	}
	if MustParse("a").Empty() {
		t.Error(`MustParse("a").Empty() = true`)
	}
}

// parseErrorCases lists malformed selectors with the offset of the error and a
// fragment of its message.
var parseErrorCases = []struct {
	name   string
	sel    string
	offset int
	msg    string
}{
	{"R8_trailing_comma", "app=web,", 8, "expected a label key"},
	{"R8_trailing_comma_and_space", "app=web, ", 9, "expected a label key"},
	{"R8_leading_comma", ",app", 0, `expected a label key, found ","`},
	{"R8_double_comma", "app,,b", 4, `expected a label key, found ","`},
	{"R8_only_comma", " , ", 1, `expected a label key, found ","`},
	{"R8_in_unclosed_list", "tier in (a", 10, `expected "," or ")"`},
	{"R8_in_unclosed_list_after_comma", "tier in (a,", 11, `expected a value after ","`},
	{"R8_in_missing_paren", "tier in a", 8, `expected "(" after "in", found "a"`},
	{"R8_notin_missing_paren", "tier notin a", 11, `expected "(" after "notin", found "a"`},
	{"R8_in_at_end", "tier in", 7, `expected "(" after "in"`},
	{"R8_in_followed_by_equals", "tier in=a", 7, `expected "(" after "in", found "="`},
	{"R8_in_empty_list", "tier in ()", 9, `the list after "in" must not be empty`},
	{"R8_notin_empty_list_with_space", "tier notin ( )", 13, `the list after "notin" must not be empty`},
	{"R8_in_leading_comma", "tier in (,a)", 9, `expected a value after "(", found ","`},
	{"R8_in_trailing_comma", "tier in (a,)", 11, `expected a value after ",", found ")"`},
	{"R8_notin_empty_value", "tier notin (a,,b)", 14, `expected a value after ",", found ","`},
	{"R8_in_missing_comma", "tier in (a b)", 11, `expected "," or ")", found "b"`},
	{"R8_in_nested_paren", "tier in ((a))", 9, `expected a value after "(", found "("`},
	{"R8_in_extra_paren", "tier in (a))", 11, `expected "," or end of selector, found ")"`},
	{"R8_in_then_word", "tier in (a) b", 12, `expected "," or end of selector, found "b"`},
	{"R8_in_needs_space_before_keyword", "tierin (a)", 7, `after key "tierin", found "("`},
	{"R8_keyword_is_case_sensitive", "tier IN (a)", 5, `after key "tier", found "IN"`},
	{"R8_missing_key_before_equals", "=web", 0, `expected a label key, found "="`},
	{"R8_missing_key_before_not_equals", "!=web", 1, `expected a label key after "!", found "="`},
	{"R8_bang_without_equals", "app!", 4, `expected "=" after "!"`},
	{"R8_bang_then_value", "app!web", 4, `expected "=" after "!", found "web"`},
	{"R8_lone_bang", "!", 1, `expected a label key after "!"`},
	{"R8_double_bang", "!!a", 1, `expected a label key after "!", found "!"`},
	{"R8_not_exists_with_value", "!a=b", 2, `expected "," or end of selector, found "="`},
	{"R8_two_equals", "a=b=c", 3, `expected "," or end of selector, found "="`},
	{"R8_triple_equals", "app===web", 5, `expected "," or end of selector, found "="`},
	{"R8_value_in_parens", "app=(web)", 4, `expected "," or end of selector, found "("`},
	{"R8_parenthesised_key", "(x)", 0, `expected a label key, found "("`},
	{"R8_key_then_paren", "x (a)", 2, `after key "x", found "("`},
	{"R8_key_then_close_paren", "x)", 1, `after key "x", found ")"`},
	{"R8_two_keys", "a b", 2, `expected "=", "==", "!=", "in", "notin", "," or end of selector after key "a", found "b"`},
	{"R8_two_values", "app=web prod", 8, `expected "," or end of selector, found "prod"`},
	{"R8_missing_comma_between_requirements", "app=web tier=x", 8, `found "tier"`},
	{"R8_offset_counts_bytes", "é=1,☃ x", 9, `after key "☃", found "x"`},
	{"R8_long_token_is_shortened", "a " + strings.Repeat("b", 100), 2, `found "` + strings.Repeat("b", 32) + `"...`},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range parseErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Parse(tc.sel)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want an error", tc.sel, sel)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): error %T %v is not a *SyntaxError", tc.sel, err, err)
			}
			if se.Selector != tc.sel {
				t.Errorf("Selector = %q, want %q", se.Selector, tc.sel)
			}
			if se.Offset != tc.offset {
				t.Errorf("Parse(%q): Offset = %d, want %d (%v)", tc.sel, se.Offset, tc.offset, err)
			}
			if !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("Parse(%q): Msg = %q, want it to contain %q", tc.sel, se.Msg, tc.msg)
			}
			if !sel.Empty() {
				t.Errorf("Parse(%q) failed but returned a non-empty Selector", tc.sel)
			}
		})
	}
}

func TestSyntaxErrorString(t *testing.T) {
	tests := []struct{ sel, want string }{
		{"tier in (a", `selector "tier in (a": at offset 10: expected "," or ")"`},
		{"a b", `selector "a b": at offset 2: expected "=", "==", "!=", "in", "notin", "," or end of selector after key "a", found "b"`},
		{"a\nb", `selector "a\nb": at offset 2: expected "=", "==", "!=", "in", "notin", "," or end of selector after key "a", found "b"`},
		{"a=\x00\n\"x", `selector "a=\x00\n\"x": at offset 4: expected "," or end of selector, found "\"x"`},
	}
	for _, tc := range tests {
		_, err := Parse(tc.sel)
		if err == nil {
			t.Fatalf("Parse(%q) succeeded", tc.sel)
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("Parse(%q) error:\n got %s\nwant %s", tc.sel, got, tc.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) error is not one line: %q", tc.sel, err.Error())
		}
	}
}

// stringCases maps selectors to their canonical form.
var stringCases = []struct {
	name string
	sel  string
	want string
}{
	{
		"R8_canonical_full", "app=web,tier!=canary,tier in (frontend,edge),public,!internal",
		"app=web,tier!=canary,tier in (edge,frontend),public,!internal",
	},
	{"R8_canonical_double_equals", "app==web", "app=web"},
	{"R8_canonical_whitespace", "  app = web ,tier in ( b , a ) ,  ! internal,x  ", "app=web,tier in (a,b),!internal,x"},
	{"R8_canonical_in_dedup", "tier in (c,a,b,a,c)", "tier in (a,b,c)"},
	{"R8_canonical_notin", "tier notin(canary)", "tier notin (canary)"},
	{"R8_canonical_empty_values", "a=,b==,c!=", "a=,b=,c!="},
	{"R8_canonical_empty_value_with_space", "a = ,b", "a=,b"},
	{"R8_canonical_keeps_input_order", "z,!y,x=1,w in (v)", "z,!y,x=1,w in (v)"},
	{"R8_canonical_keeps_duplicates", "a=1,a=1", "a=1,a=1"},
	{"R8_canonical_keywords_as_keys", "in,notin in (in,notin),!in", "in,notin in (in,notin),!in"},
	{"R8_canonical_empty", " ", ""},
}

func TestString(t *testing.T) {
	for _, tc := range stringCases {
		t.Run(tc.name, func(t *testing.T) {
			sel := MustParse(tc.sel)
			got := sel.String()
			if got != tc.want {
				t.Errorf("Parse(%q).String() = %q, want %q", tc.sel, got, tc.want)
			}
			again, err := Parse(got)
			if err != nil {
				t.Fatalf("Parse(%q): %v", got, err)
			}
			if !reflect.DeepEqual(again, sel) {
				t.Errorf("Parse(%q) = %#v, want %#v", got, again, sel)
			}
			if s := again.String(); s != got {
				t.Errorf("String() is not stable: %q then %q", got, s)
			}
		})
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("MustParse did not panic")
		}
		if _, ok := r.(*SyntaxError); !ok {
			t.Errorf("MustParse panicked with %T %v, want a *SyntaxError", r, r)
		}
	}()
	MustParse("tier in (a")
}

func TestMatchesDoesNotAllocate(t *testing.T) {
	sel := MustParse("app=web,tier!=canary,tier in (edge,frontend,a,b,c,d,e,f,g),zone notin (x,y),public,!internal")
	sets := []labels{
		{"app": "web", "tier": "edge", "public": "", "zone": "z"},
		{"app": "web", "tier": "g", "public": "yes"},
		{"app": "web", "tier": "zzz", "public": ""},
		{"app": "api"},
		nil,
	}
	for _, l := range sets {
		if n := testing.AllocsPerRun(100, func() { sel.Matches(l) }); n != 0 {
			t.Errorf("Matches(%v) allocates %v times per run", l, n)
		}
	}
}

func BenchmarkMatches(b *testing.B) {
	sel := MustParse("app=web,tier!=canary,tier in (edge,frontend),public,!internal")
	l := labels{"app": "web", "tier": "edge", "public": "", "caddy.host": "example.com"}
	b.ReportAllocs()
	for b.Loop() {
		if !sel.Matches(l) {
			b.Fatal("no match")
		}
	}
}
