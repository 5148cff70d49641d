// Package foreignlabels reads the labels other reverse proxies route by,
// caddy-docker-proxy's and Traefik's, as they are, into caddy-dicer's own
// label model (caddy.host, caddy.path, caddy.port, caddy.network), and
// refuses, failing closed, a label set that asks for anything a dynamic
// upstream source cannot do (R2f). It is pure: no I/O, no logging, no
// state; the Docker and Swarm adapters call Apply on every container and
// service they translate, and the catalog warns about and unroutes an
// instance whose labels were refused.
//
// Everything here reads tenant input: each entry point is bounded in the
// labels it looks at (MaxLabels keys of a set, MaxKeyBytes and
// MaxValueBytes each) and does work linear in their bytes; no regular
// expressions.
package foreignlabels

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Set is the label sets an Engine connection reads, a bit each.
type Set uint8

// The label sets. SetCaddyDicer's own labels are always read: they are the
// model the others translate into.
//
// SetSkipProtections is no set but the operator's opt-out (the word
// skip-foreign-protections): a container carrying protection labels of a
// set not read (Protection) is routed by the labels read, that protection
// skipped. Without it such a container is not routed (R2f).
const (
	SetCaddyDicer Set = 1 << iota
	SetCaddyDockerProxy
	SetTraefik
	SetSkipProtections
)

// Names of the sets, as the `labels` setting spells them, and of the
// opt-out.
const (
	NameCaddyDicer       = "caddy-dicer"
	NameCaddyDockerProxy = "caddy-docker-proxy"
	NameTraefik          = "traefik"
	NameSkipProtections  = "skip-foreign-protections"
)

// ParseSets reads the words of the `labels` setting: any of caddy-dicer,
// caddy-docker-proxy and traefik, each at most once. caddy-dicer is read
// whether named or not.
func ParseSets(words []string) (Set, error) {
	s := SetCaddyDicer
	seen := Set(0)
	for _, w := range words {
		var b Set
		switch w {
		case NameCaddyDicer:
			b = SetCaddyDicer
		case NameCaddyDockerProxy:
			b = SetCaddyDockerProxy
		case NameTraefik:
			b = SetTraefik
		case NameSkipProtections:
			b = SetSkipProtections
		default:
			return 0, errors.New(strconv.QuoteToASCII(clip(w)) + " is not a label set: caddy-dicer, caddy-docker-proxy or traefik (or the opt-out skip-foreign-protections)")
		}
		if seen&b != 0 {
			return 0, errors.New(w + " is named twice")
		}
		seen |= b
		s |= b
	}
	return s, nil
}

// Words is the setting's words for s, in a fixed order (a connection's key).
func (s Set) Words() []string {
	var out []string
	if s&SetCaddyDockerProxy != 0 {
		out = append(out, NameCaddyDockerProxy)
	}
	if s&SetTraefik != 0 {
		out = append(out, NameTraefik)
	}
	if s&SetSkipProtections != 0 {
		out = append(out, NameSkipProtections)
	}
	return out
}

// Bounds on the foreign labels of one instance. Over any of them the
// instance is refused.
const (
	// MaxLabels is how many keys of one set an instance may carry.
	MaxLabels = 128
	// MaxKeyBytes and MaxValueBytes bound each such label.
	MaxKeyBytes   = 256
	MaxValueBytes = 4 << 10
	// maxSites bounds caddy-docker-proxy's sites (`caddy`, `caddy_N`) and
	// Traefik's routers of one instance.
	maxSites = 16
	// maxClauses bounds the terms a Traefik rule expands into.
	maxClauses = 64
	// maxDepth bounds the nesting of a Traefik rule's parentheses.
	maxDepth = 8
	// maxShown bounds any tenant text a Refusal quotes.
	maxShown = 120
)

// Translated is what a foreign label set asks for, in caddy-dicer's model.
type Translated struct {
	// From is the set read: NameCaddyDockerProxy or NameTraefik.
	From string
	// Hosts are the site's hosts (caddy.host), in order, deduplicated.
	Hosts []string
	// Paths are the path prefixes (caddy.path); none means the whole site.
	Paths []string
	// Strip says the prefix is stripped before the request is sent
	// (caddy-docker-proxy's handle_path), else kept (its handle,
	// Traefik's PathPrefix): with Paths, the instance's caddy.strip_path.
	Strip bool
	// Port is the port requests go to (caddy.port); 0: none named.
	Port uint16
	// Network is the network to reach the instance on (caddy.network).
	Network string
}

// Refusal says why an instance's foreign labels are not routed (R2f).
type Refusal struct {
	// From is the set: NameCaddyDockerProxy or NameTraefik.
	From string
	// Label is the key at fault (tenant text: quote it where a person
	// reads it; String does).
	Label string
	// Why says what it asks that a dynamic source cannot do.
	Why string
	// Caddyfile is what to write in the Caddyfile instead, if anything.
	Caddyfile string
}

// String is the refusal as a person reads it, tenant text quoted and
// clipped: `caddy-docker-proxy label "caddy.basic_auth": basic_auth
// protects the site, and a dynamic source cannot; write it in the
// Caddyfile: basic_auth { ... }`.
func (r *Refusal) String() string {
	s := r.From + " label " + strconv.QuoteToASCII(clip(r.Label)) + ": " + r.Why
	if r.Caddyfile != "" {
		s += "; write it in the site's Caddyfile: " + strconv.QuoteToASCII(clip(r.Caddyfile))
	}
	return s
}

func (r *Refusal) Error() string { return r.String() }

// clip cuts tenant text to maxShown bytes, never inside a character.
func clip(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return strings.ToValidUTF8(s[:maxShown], "") + "..."
}

// Apply returns the labels an instance with labels is routed by under the
// sets: labels itself when no foreign set is read or none applies; else a
// copy with caddy.host, caddy.path, caddy.strip_path (with a path),
// caddy.port and caddy.network set from the foreign labels. A refusal (R2f) gives a copy without caddy.host and
// caddy.path and with catalog.LabelRefused saying why: the catalog routes
// no request to such an instance and claims none of its hosts. A
// LabelRefused the instance carries itself is dropped first (only this
// function writes it).
//
// An instance carrying its own caddy.host or caddy.path beside a foreign
// set that routes it, or two foreign sets that route it, is refused: which
// one was meant cannot be told, and the other's protections could be the
// ones skipped.
//
// Under any sets, caddy-dicer's alone included, an instance carrying a
// protection label of caddy-docker-proxy or Traefik (Protection) is
// refused, unless sets has SetSkipProtections: a selector or its own
// caddy.host would route it with that protection silently skipped.
func Apply(sets Set, labels map[string]string) map[string]string {
	if _, forged := labels[catalog.LabelRefused]; forged {
		labels = maps.Clone(labels)
		delete(labels, catalog.LabelRefused)
	}
	if len(labels) == 0 {
		return labels
	}
	if sets&(SetCaddyDockerProxy|SetTraefik) == 0 {
		if sets&SetSkipProtections != 0 {
			return labels
		}
		r := Protection(labels)
		if r == nil {
			return labels
		}
		return refused(labels, r)
	}
	var found []Translated
	var refusal *Refusal
	if sets&SetCaddyDockerProxy != 0 {
		t, r := CaddyDockerProxy(labels)
		if r != nil {
			refusal = r
		} else if t.From != "" {
			found = append(found, t)
		}
	}
	if sets&SetTraefik != 0 && refusal == nil {
		t, r := Traefik(labels)
		if r != nil {
			refusal = r
		} else if t.From != "" {
			found = append(found, t)
		}
	}
	if refusal == nil && sets&SetSkipProtections == 0 {
		refusal = Protection(labels) // of a set not read: a read one's refused above
	}
	if refusal == nil && len(found) == 0 {
		return labels
	}
	if refusal == nil {
		refusal = mixed(found, labels)
	}
	if refusal != nil {
		return refused(labels, refusal)
	}
	out := maps.Clone(labels)
	t := found[0]
	out[catalog.LabelHost] = strings.Join(t.Hosts, ",")
	if len(t.Paths) > 0 {
		out[catalog.LabelPath] = strings.Join(t.Paths, ",")
		out[catalog.LabelStripPath] = strconv.FormatBool(t.Strip) // R2d: the container's own, whatever the source's strip_path_prefix
	}
	if t.Port != 0 {
		out[catalog.LabelPort] = strconv.Itoa(int(t.Port))
	}
	if t.Network != "" {
		out[catalog.LabelNetwork] = t.Network
	}
	return out
}

// refused is a copy of labels routed by nothing: no caddy.host, no
// caddy.path, and catalog.LabelRefused saying why.
func refused(labels map[string]string, r *Refusal) map[string]string {
	out := maps.Clone(labels)
	delete(out, catalog.LabelHost)
	delete(out, catalog.LabelPath)
	out[catalog.LabelRefused] = r.String()
	return out
}

// mixed refuses two sets routing one instance, or one beside the
// instance's own routing labels, or one naming a port or network, or
// stripping the prefix or not, otherwise than the instance's own label.
func mixed(found []Translated, labels map[string]string) *Refusal {
	t := found[0]
	if len(found) > 1 {
		return &Refusal{From: t.From, Label: "caddy", Why: "the instance carries labels of " + t.From + " and of " + found[1].From + "; one set routes an instance"}
	}
	for _, own := range []string{catalog.LabelHost, catalog.LabelPath} {
		if _, ok := labels[own]; ok {
			return &Refusal{From: t.From, Label: own, Why: "the instance carries caddy-dicer's " + own + " beside " + t.From + "'s labels; one set routes an instance"}
		}
	}
	if p, ok := labels[catalog.LabelPort]; ok && t.Port != 0 && strings.TrimSpace(p) != strconv.Itoa(int(t.Port)) {
		return &Refusal{From: t.From, Label: catalog.LabelPort, Why: "names another port than " + t.From + "'s labels"}
	}
	if v, ok := labels[catalog.LabelStripPath]; ok && len(t.Paths) > 0 && !strings.EqualFold(strings.TrimSpace(v), strconv.FormatBool(t.Strip)) {
		return &Refusal{From: t.From, Label: catalog.LabelStripPath, Why: "says otherwise than " + t.From + "'s labels about stripping the path prefix"}
	}
	if n, ok := labels[catalog.LabelNetwork]; ok && t.Network != "" && strings.TrimSpace(n) != t.Network {
		return &Refusal{From: t.From, Label: catalog.LabelNetwork, Why: "names another network than " + t.From + "'s labels"}
	}
	return nil
}

// keysOf returns the keys of labels for which keep is true, sorted, or a
// refusal when they are over the bounds. The refusal is the same
// whatever the map's iteration order (the first offending key in key
// order), so that a re-listing that finds the same labels finds the same
// refusal and warns no more.
func keysOf(labels map[string]string, from string, keep func(string) bool) ([]string, *Refusal) {
	var keys []string
	for k := range labels {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > MaxLabels {
		return nil, &Refusal{From: from, Label: from, Why: "the instance carries " + strconv.Itoa(len(keys)) + " of its labels, more than " + strconv.Itoa(MaxLabels)}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := labels[k]
		if len(k) > MaxKeyBytes || len(v) > MaxValueBytes {
			return nil, &Refusal{From: from, Label: k, Why: "the label is over " + strconv.Itoa(MaxKeyBytes) + " bytes of key or " + strconv.Itoa(MaxValueBytes) + " of value"}
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, &Refusal{From: from, Label: k, Why: "the label is not valid UTF-8"}
		}
	}
	return keys, nil
}

// quote is tenant text in a refusal's words: quoted, escaped, clipped.
func quote(s string) string { return strconv.QuoteToASCII(clip(s)) }

// hostsOf reads a list of host names separated by commas or spaces:
// names of letters, digits, `-`, `_` and `.`, or a wildcard `*.` and such a
// name; at most catalog.MaxHostNames.
func hostsOf(list string) (hosts []string, bad string) {
	seen := map[string]bool{}
	for h := range strings.FieldsFuncSeq(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if !validHost(h) {
			return nil, h
		}
		if !seen[h] {
			if seen[h] = true; len(seen) > catalog.MaxHostNames {
				return nil, "more than " + strconv.Itoa(catalog.MaxHostNames) + " names"
			}
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, "no host"
	}
	return hosts, ""
}

// validHost reports a host name or a wildcard `*.name`, no port, no
// scheme, no placeholder.
func validHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || h[0] == '.' || strings.Contains(h, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
