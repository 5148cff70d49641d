// Package selector parses and evaluates Kubernetes-style label selectors
// (rule R8 of the behaviour contract), which pick instances by their labels.
//
// A selector is a comma-separated list of requirements; an instance matches
// when its labels satisfy every requirement (comma means AND):
//
//	Selector                   Matches an instance whose
//	app=web, app==web          label app is web
//	tier!=canary               label tier is not canary, or which has no tier label
//	tier in (frontend,edge)    label tier is one of these
//	tier notin (canary)        label tier is none of these, or which has no tier label
//	public                     has a label public, whatever its value
//	!internal                  has no label internal
//
// For example "app=web,tier notin (canary),!internal" matches the instances
// labelled app=web that are not canaries and not internal.
//
// # Keys and values
//
// A key or a value is a run of one or more characters other than whitespace,
// commas, parentheses, "=" and "!". Nothing else is checked: keys such as
// "caddy.host" or "example.com/team" are fine, and there is no quoting.
//
// The value after "=", "==" or "!=" may be empty: "app=" matches an instance
// whose label app is present with the empty value, and "app!=" one whose label
// app is missing or not empty. The values listed after "in" and "notin" may
// not be empty, and neither may the list: "tier in ()" and "tier in (a,,b)"
// are errors.
//
// # Whitespace
//
// Whitespace (any Unicode white space) is allowed before and after every key,
// value, operator, comma and parenthesis: "app = web , tier in ( a , b )" is
// the same selector as "app=web,tier in (a,b)". The keywords "in" and "notin"
// are case-sensitive and must be separated from the key by whitespace
// ("tierin (a)" is an error, not a key "tier"); the "(" may follow them
// directly. A selector that is empty or only whitespace matches everything.
//
// # Errors
//
// Parse reports a malformed selector as a *SyntaxError holding the byte
// offset of the offending character, or the length of the selector when the
// input ends too early.
//
// # Canonical form
//
// Selector.String prints the canonical form of a selector: requirements in
// input order, separated by a comma and no space, "==" printed as "=", and
// the values of "in" and "notin" sorted and without duplicates, for example
// "app=web,tier!=canary,tier in (edge,frontend),public,!internal". Parsing
// the canonical form gives back an equal selector.
package selector
