package selector

import (
	"fmt"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// op is the operator of one requirement.
type op uint8

const (
	opEquals    op = iota // key=value, key==value
	opNotEquals           // key!=value
	opIn                  // key in (values)
	opNotIn               // key notin (values)
	opExists              // key
	opNotExists           // !key
)

// requirement is one comma-separated term of a selector.
type requirement struct {
	op    op
	key   string
	value string   // opEquals, opNotEquals
	set   []string // opIn, opNotIn: sorted, without duplicates, never empty
}

func (r *requirement) matches(labels map[string]string) bool {
	v, ok := labels[r.key]
	switch r.op {
	case opEquals:
		return ok && v == r.value
	case opNotEquals:
		return !ok || v != r.value
	case opIn:
		return ok && r.contains(v)
	case opNotIn:
		return !ok || !r.contains(v)
	case opExists:
		return ok
	case opNotExists:
		return !ok
	}
	return false
}

func (r *requirement) contains(v string) bool {
	_, found := slices.BinarySearch(r.set, v)
	return found
}

func (r *requirement) appendTo(b []byte) []byte {
	switch r.op {
	case opEquals:
		b = append(b, r.key...)
		b = append(b, '=')
		b = append(b, r.value...)
	case opNotEquals:
		b = append(b, r.key...)
		b = append(b, "!="...)
		b = append(b, r.value...)
	case opIn, opNotIn:
		b = append(b, r.key...)
		if r.op == opIn {
			b = append(b, " in ("...)
		} else {
			b = append(b, " notin ("...)
		}
		for i, v := range r.set {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, v...)
		}
		b = append(b, ')')
	case opExists:
		b = append(b, r.key...)
	case opNotExists:
		b = append(b, '!')
		b = append(b, r.key...)
	}
	return b
}

// Selector is a parsed label selector; the zero value matches every label set.
// A Selector is immutable and safe for concurrent use.
type Selector struct {
	reqs []requirement
}

// Parse parses a label selector. A selector that is empty or only whitespace
// gives the zero Selector, which matches everything. A malformed selector
// gives a *SyntaxError.
func Parse(s string) (Selector, error) {
	p := parser{s: s}
	reqs, err := p.parse()
	if err != nil {
		return Selector{}, err
	}
	return Selector{reqs: reqs}, nil
}

// MustParse is like Parse but panics if the selector is malformed. It is meant
// for tests and for selectors that are constants.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// Matches reports whether labels satisfy every requirement of the selector.
// A nil map is an instance without labels. Matches does not allocate.
func (s Selector) Matches(labels map[string]string) bool {
	for i := range s.reqs {
		if !s.reqs[i].matches(labels) {
			return false
		}
	}
	return true
}

// String returns the canonical form of the selector (see the package
// documentation); the zero Selector gives "". Parsing it gives back an equal
// Selector.
func (s Selector) String() string {
	var b []byte
	for i := range s.reqs {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.reqs[i].appendTo(b)
	}
	return string(b)
}

// Empty reports whether the selector has no requirements, and so matches
// every label set.
func (s Selector) Empty() bool {
	return len(s.reqs) == 0
}

// SyntaxError reports where a selector is malformed.
type SyntaxError struct {
	Selector string // the whole input
	Offset   int    // byte offset of the offending character (len(Selector) at end of input)
	Msg      string // what was expected there, e.g. `expected "(" after "in"`
}

// Error returns a one-line description of the error, such as
//
//	selector "tier in (a": at offset 10: expected "," or ")"
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("selector %q: at offset %d: %s", e.Selector, e.Offset, e.Msg)
}

// parser is a hand-written recursive-descent parser over the bytes of s.
type parser struct {
	s   string
	pos int
}

// isSpecial reports whether r ends a key or value on its own.
func isSpecial(r rune) bool {
	switch r {
	case ',', '(', ')', '=', '!':
		return true
	}
	return unicode.IsSpace(r)
}

// peek returns the rune at the current position and its width; width 0 at
// the end of input. Invalid UTF-8 decodes as utf8.RuneError of width 1 and so
// is part of a key or value.
func (p *parser) peek() (rune, int) {
	if p.pos >= len(p.s) {
		return 0, 0
	}
	return utf8.DecodeRuneInString(p.s[p.pos:])
}

func (p *parser) atEnd() bool { return p.pos >= len(p.s) }

// skipSpace skips whitespace and reports whether there was any.
func (p *parser) skipSpace() bool {
	start := p.pos
	for {
		r, w := p.peek()
		if w == 0 || !unicode.IsSpace(r) {
			return p.pos > start
		}
		p.pos += w
	}
}

// word consumes a (possibly empty) key or value.
func (p *parser) word() string {
	start := p.pos
	for {
		r, w := p.peek()
		if w == 0 || isSpecial(r) {
			return p.s[start:p.pos]
		}
		p.pos += w
	}
}

// wordAt returns the key or value starting at i without consuming it.
func (p *parser) wordAt(i int) string {
	q := parser{s: p.s, pos: i}
	return q.word()
}

// errorf returns a *SyntaxError at offset at. Unless at is the end of input,
// the message says what was found there.
func (p *parser) errorf(at int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if at < len(p.s) {
		msg += ", found " + p.describe(at)
	}
	return &SyntaxError{Selector: p.s, Offset: at, Msg: msg}
}

// describe quotes the token at offset i for an error message: a whole key or
// value (shortened if long), or else a single character.
func (p *parser) describe(i int) string {
	tok := p.wordAt(i)
	if tok == "" {
		_, w := utf8.DecodeRuneInString(p.s[i:])
		tok = p.s[i : i+w]
	} else if len(tok) > 32 {
		n := 32
		for n > 32-utf8.UTFMax && !utf8.RuneStart(tok[n]) {
			n-- // do not cut a character in two
		}
		return strconv.Quote(tok[:n]) + "..."
	}
	return strconv.Quote(tok)
}

// consume consumes the byte c if it comes next and reports whether it did.
func (p *parser) consume(c byte) bool {
	if p.pos < len(p.s) && p.s[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *parser) parse() ([]requirement, error) {
	p.skipSpace()
	if p.atEnd() {
		return nil, nil
	}
	var reqs []requirement
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		p.skipSpace()
		if p.atEnd() {
			return reqs, nil
		}
		if !p.consume(',') {
			return nil, p.errorf(p.pos, `expected "," or end of selector`)
		}
		p.skipSpace()
	}
}

// requirement parses one requirement. It starts at a non-space character or
// at the end of input, and stops after the last token of the requirement.
func (p *parser) requirement() (requirement, error) {
	if p.consume('!') {
		p.skipSpace()
		key := p.word()
		if key == "" {
			return requirement{}, p.errorf(p.pos, `expected a label key after "!"`)
		}
		return requirement{op: opNotExists, key: key}, nil
	}

	key := p.word()
	if key == "" {
		return requirement{}, p.errorf(p.pos, "expected a label key")
	}
	afterKey := p.pos
	spaced := p.skipSpace()

	switch {
	case p.consume('='):
		p.consume('=') // "==" is the same as "="
		return p.value(key, opEquals)
	case p.consume('!'):
		if !p.consume('=') {
			return requirement{}, p.errorf(p.pos, `expected "=" after "!"`)
		}
		return p.value(key, opNotEquals)
	}

	if spaced {
		kwStart := p.pos
		switch kw := p.word(); kw {
		case "in", "notin":
			o := opIn
			if kw == "notin" {
				o = opNotIn
			}
			return p.set(key, kw, o)
		case "":
			// Not a keyword: "," or the end of input, left to the caller,
			// or a stray "(" or ")", reported below.
		default:
			return requirement{}, p.errorf(kwStart,
				`expected "=", "==", "!=", "in", "notin", "," or end of selector after key %q`, key)
		}
	}

	// A lone key: the caller checks that "," or the end of input follows.
	if r, w := p.peek(); w != 0 && r != ',' {
		return requirement{}, p.errorf(p.pos,
			`expected "=", "==", "!=", "in", "notin", "," or end of selector after key %q`, key)
	}
	p.pos = afterKey
	return requirement{op: opExists, key: key}, nil
}

// value parses the possibly empty value after "=", "==" or "!=".
func (p *parser) value(key string, o op) (requirement, error) {
	p.skipSpace()
	return requirement{op: o, key: key, value: p.word()}, nil
}

// set parses the parenthesised value list after "in" or "notin".
func (p *parser) set(key, kw string, o op) (requirement, error) {
	p.skipSpace()
	if !p.consume('(') {
		return requirement{}, p.errorf(p.pos, `expected "(" after %q`, kw)
	}
	var vals []string
	for {
		p.skipSpace()
		v := p.word()
		if v == "" {
			switch {
			case len(vals) == 0 && p.pos < len(p.s) && p.s[p.pos] == ')':
				return requirement{}, p.errorf(p.pos, "expected a value: the list after %q must not be empty", kw)
			case len(vals) == 0:
				return requirement{}, p.errorf(p.pos, `expected a value after "("`)
			default:
				return requirement{}, p.errorf(p.pos, `expected a value after ","`)
			}
		}
		vals = append(vals, v)
		p.skipSpace()
		if p.consume(')') {
			break
		}
		if !p.consume(',') {
			return requirement{}, p.errorf(p.pos, `expected "," or ")"`)
		}
	}
	slices.Sort(vals)
	vals = slices.Clip(slices.Compact(vals))
	return requirement{op: o, key: key, set: vals}, nil
}
