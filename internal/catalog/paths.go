package catalog

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/benbjohnson/immutable"
)

// The caps on one caddy.path label (R2d): a label over them, like one with
// a prefix that is not valid, makes the instance serve no path at all. They
// bound the work an update of the instance costs the catalog.
const (
	// MaxPathPrefixes is the most prefixes one caddy.path label may list
	// (duplicates counted once).
	MaxPathPrefixes = 32
	// MaxPathLabelBytes is the longest caddy.path label value, in bytes.
	MaxPathLabelBytes = 1 << 10
)

// parsePaths splits and normalizes a caddy.path label (R2d): the prefixes it
// claims, whether the label is there at all (restricted: the instance then
// serves only under its prefixes), and, for a label that is not valid, why
// (bad): such an instance claims no prefix and serves no path. An empty
// label is no label.
func parsePaths(raw string) (prefixes []string, restricted bool, bad string) {
	if strings.TrimSpace(raw) == "" {
		return nil, false, ""
	}
	if len(raw) > MaxPathLabelBytes {
		return nil, true, "over the cap of " + strconv.Itoa(MaxPathLabelBytes) + " bytes"
	}
	for item := range strings.SplitSeq(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, why := NormalizePathPrefix(item)
		if why != "" {
			return nil, true, strconv.Quote(ClipLabel(item)) + " " + why
		}
		if contains(prefixes, p) {
			continue
		}
		if prefixes = append(prefixes, p); len(prefixes) > MaxPathPrefixes {
			return nil, true, "over the cap of " + strconv.Itoa(MaxPathPrefixes) + " prefixes"
		}
	}
	if len(prefixes) == 0 {
		return nil, true, "lists no prefix"
	}
	return prefixes, true, ""
}

// stripChoice is an instance's caddy.strip_path label (R2d).
type stripChoice uint8

const (
	stripUnset stripChoice = iota // no label: the source's strip_path_prefix
	stripYes
	stripNo
)

// parseStrip reads the caddy.strip_path label of labels: `true` or
// `false` (spaces around and case ignored), none or an empty value
// unset. A value that is neither makes the instance's paths not valid,
// bad saying why, as a bad caddy.path does (it then serves no path): an
// instance whose label meant to keep its prefix is never sent a request
// without it, nor the reverse. bad, if already set, is kept.
func parseStrip(labels map[string]string, bad string) (stripChoice, string) {
	raw, ok := labels[LabelStripPath]
	if !ok {
		return stripUnset, bad
	}
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "":
		return stripUnset, bad
	case "true":
		return stripYes, bad
	case "false":
		return stripNo, bad
	}
	if bad == "" {
		bad = "caddy.strip_path " + strconv.Quote(ClipLabel(raw)) + " is not true or false"
	}
	return stripUnset, bad
}

// NormalizePathPrefix turns an entry of a caddy.path label into the form a
// request's path is matched against (R2d): a leading `/` (added if
// missing), no trailing `/` (except the root, `/`), in lower case as
// Caddy's path matcher compares paths. It says why (why != "") a prefix is
// not valid: an empty, `.` or `..` segment, a `%`-escape (requests are
// matched on their decoded path), a glob or placeholder character
// (`*?[]{}`), `\`, `#`, a space or control character, invalid UTF-8.
func NormalizePathPrefix(p string) (prefix, why string) {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if p = strings.TrimRight(p, "/"); p == "" {
		return "/", ""
	}
	if !utf8.ValidString(p) {
		return "", "is not valid UTF-8"
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c <= ' ' || c == 0x7f:
			return "", "holds a space or control character"
		case strings.IndexByte(`%*?[]{}\#`, c) >= 0:
			return "", "holds " + strconv.QuoteRune(rune(c)) + " (a prefix is matched literally, against the decoded path)"
		}
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return "", "holds an empty segment (//)"
		case ".", "..":
			return "", "holds a " + seg + " segment"
		}
	}
	return strings.ToLower(p), ""
}

// RequestPath is the form a request's path is matched in (R2d), the one
// Caddy's path matcher reads (`path /api /api/*`): the decoded path
// (URL.Path) in lower case, with `.` and `..` segments resolved and
// doubled slashes merged (path.Clean). A path that does not start with `/`
// (`*`, an empty one) is the root. A path already in that form, the usual
// case, costs one pass over its bytes and no allocation.
func RequestPath(p string) string {
	if isRequestPath(p) {
		return p
	}
	if p == "" || p[0] != '/' {
		return "/"
	}
	return path.Clean(strings.ToLower(p))
}

// isRequestPath reports whether p is in the form RequestPath gives, in one
// pass: a leading `/`, no upper-case or non-ASCII byte (strings.ToLower
// would change it), no empty, `.` or `..` segment, no trailing `/` but
// the root's.
func isRequestPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	start := 1 // of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c != '/' {
				if c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf {
					return false
				}
				continue
			}
		}
		switch p[start:i] {
		case "", ".", "..":
			return false
		}
		start = i + 1
	}
	return true
}

// PathMatches reports whether prefix (from NormalizePathPrefix) matches the
// request path p (from RequestPath) on segment boundaries: `/api` matches
// `/api` and `/api/x`, not `/apix`; `/` matches every path.
func PathMatches(prefix, p string) bool {
	return prefix == "/" || p == prefix || strings.HasPrefix(p, prefix) && p[len(prefix)] == '/'
}

// pathNode is one node of the segment trie of the instances a route may
// send a host's requests to (R2d): the instances that claim its prefix,
// by name, and the nodes one segment deeper, sorted by segment. The root
// holds the instances without a caddy.path label and those that list `/`.
// A trie is built when a snapshot is published, for a host, a wildcard
// suffix or a view with an instance labelled caddy.path, and never changes
// after.
type pathNode struct {
	prefix    string
	seg       string // the last segment of prefix
	claimants []*entry
	children  []*pathNode
	// serves is whether one of claimants serves every host of the trie's
	// key in any case (not restricted to other hosts): a request then
	// stops at this node without asking each claimant (see longest).
	serves bool
	// stripYes, stripNo and stripUnset say whether one of claimants has
	// caddy.strip_path true, false, or none (see StripPrefix).
	stripYes, stripNo, stripUnset bool
}

// buildPaths is the trie of list (sorted by name), or nil when no instance
// of it has a caddy.path label: a request then skips the step.
func buildPaths(list []*entry) *pathNode {
	if !slices.ContainsFunc(list, func(e *entry) bool { return e.pathed }) {
		return nil
	}
	root := &pathNode{prefix: "/"}
	made := map[string]*pathNode{"/": root} // by prefix, while building
	for _, e := range list {
		if !e.pathed {
			root.claimants = append(root.claimants, e)
			continue
		}
		for _, p := range e.paths {
			n := root.grow(p, made)
			n.claimants = append(n.claimants, e)
		}
	}
	root.finish()
	return root
}

// grow is the node of prefix (from NormalizePathPrefix) under the root n,
// with the nodes on its way, made where made (by prefix) has none.
func (n *pathNode) grow(prefix string, made map[string]*pathNode) *pathNode {
	for i := 1; i < len(prefix); {
		j := strings.IndexByte(prefix[i:], '/')
		if j < 0 {
			j = len(prefix)
		} else {
			j += i
		}
		child := made[prefix[:j]]
		if child == nil {
			child = &pathNode{prefix: prefix[:j], seg: prefix[i:j]}
			made[prefix[:j]] = child
			n.children = append(n.children, child)
		}
		n, i = child, j+1
	}
	return n
}

// finish sorts the children of n and of the nodes below it by segment,
// for child, and notes which nodes have an unrestricted claimant.
func (n *pathNode) finish() {
	slices.SortFunc(n.children, func(a, b *pathNode) int { return strings.Compare(a.seg, b.seg) })
	n.serves = slices.ContainsFunc(n.claimants, func(e *entry) bool { return !e.restricted })
	for _, e := range n.claimants {
		switch e.strip {
		case stripYes:
			n.stripYes = true
		case stripNo:
			n.stripNo = true
		default:
			n.stripUnset = true
		}
	}
	for _, c := range n.children {
		c.finish()
	}
}

// child is the node one segment seg deeper, nil if none: a comparison
// per child for a few, a binary search for more; no hashing.
func (n *pathNode) child(seg string) *pathNode {
	if len(n.children) <= 8 {
		for _, c := range n.children {
			if c.seg == seg {
				return c
			}
		}
		return nil
	}
	i, ok := slices.BinarySearchFunc(n.children, seg, func(c *pathNode, seg string) int { return strings.Compare(c.seg, seg) })
	if !ok {
		return nil
	}
	return n.children[i]
}

// at is the node of prefix (from NormalizePathPrefix), nil when there is
// none.
func (n *pathNode) at(prefix string) *pathNode {
	for i := 1; n != nil && i < len(prefix); {
		j := strings.IndexByte(prefix[i:], '/')
		if j < 0 {
			j = len(prefix)
		} else {
			j += i
		}
		n, i = n.child(prefix[i:j]), j+1
	}
	return n
}

// longest is the deepest node on the way of p (from RequestPath) with a
// claimant that serves host (in any state: a prefix whose instances are
// all down is still claimed, and its requests never fall to a shorter
// one), else the root: one walk of p, comparing each segment with the
// node's children. With listed, n is the trie of host's exact listing,
// every instance of which serves host: a node with a claimant is claimed.
func (n *pathNode) longest(p, host string, exact, listed bool) *pathNode {
	best := n
	for rest := p; len(rest) > 1; {
		rest = rest[1:]
		seg := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		if n = n.child(seg); n == nil {
			break
		}
		if len(n.claimants) > 0 && (listed || n.serves || slices.ContainsFunc(n.claimants, func(e *entry) bool { return e.servesHost(host, exact) })) {
			best = n
		}
	}
	return best
}

// serving is the node whose claimants serve a request of route for host:
// the longest claimed prefix of route.Path, or, with route.PathExact, the
// node of route.Path itself (noPath when nobody claims it). listed is as
// for longest.
func (n *pathNode) serving(route Route, host string, exact, listed bool) *pathNode {
	if !route.PathExact {
		return n.longest(RequestPath(route.Path), host, exact, listed)
	}
	if route.Path == "" {
		return n
	}
	if node := n.at(route.Path); node != nil {
		return node
	}
	return &noPath
}

// noPath is the node of a prefix nobody claims.
var noPath pathNode

// pathsOf is the trie of the candidates route has for host (see
// candidates), nil when none of them has a caddy.path label.
func (s *Snapshot) pathsOf(route Route, host string, listed bool) *pathNode {
	switch {
	case route.View != nil:
		return s.viewPaths[route.View]
	case s.hostPaths == nil:
		return nil
	case listed:
		if s.hostPaths.Len() == 0 {
			return nil
		}
		n, _ := s.hostPaths.Get(host)
		return n
	}
	if s.wildPaths.Len() == 0 {
		return nil
	}
	suffix, ok := WildcardSuffix(host)
	if !ok {
		return nil
	}
	n, _ := s.wildPaths.Get(suffix)
	return n
}

// PathPrefix is the longest prefix that an instance serving host on route,
// in any state, claims of route.Path (R2d): "/" when none does. With
// claimedElsewhere, as for Pick. A walk of the path through the trie,
// after the host lookup; no allocation.
func (s *Snapshot) PathPrefix(route Route, host string, claimedElsewhere bool) string {
	_, exact, listed := s.claimants(route, host, claimedElsewhere)
	paths := s.pathsOf(route, host, listed)
	if paths == nil {
		return "/"
	}
	route.PathExact = false
	return paths.serving(route, host, exact, listed).prefix
}

// StripPrefix is the prefix to cut from a request of route for host
// before it is sent (R2d), "" for none: the longest claimed prefix of
// route.Path (as PathPrefix, never the root) when every instance claiming
// it strips it, by its caddy.strip_path label, else, without one, by
// dflt (the source's strip_path_prefix). When they disagree, nothing is
// cut: an instance's label changes only how requests are sent to it and
// to instances agreeing with it, never the path another instance that
// keeps its prefix is sent. A walk of the path, as PathPrefix, unless
// neither dflt nor any instance so far asked to strip; no allocation.
func (s *Snapshot) StripPrefix(route Route, host string, claimedElsewhere, dflt bool) string {
	if !dflt && !s.stripLabelled {
		return "" // no instance says strip, nor the source: no walk
	}
	_, exact, listed := s.claimants(route, host, claimedElsewhere)
	paths := s.pathsOf(route, host, listed)
	if paths == nil {
		return ""
	}
	route.PathExact = false
	n := paths.serving(route, host, exact, listed)
	if n.prefix == "/" || n.prefix == "" {
		return ""
	}
	yes := n.stripYes || n.stripUnset && dflt
	no := n.stripNo || n.stripUnset && !dflt
	if yes && no && !listed {
		yes, no = n.stripOfServing(host, exact, dflt) // R2d: only those that serve host have a say
	}
	if !yes || no {
		return ""
	}
	return n.prefix
}

// stripOfServing is whether the claimants of n that serve host strip
// (yes) and keep (no) its prefix, without their label by dflt: on a trie
// of a view or a wildcard, an instance restricted to another host by its
// caddy.host has no say in how this host's requests are sent.
func (n *pathNode) stripOfServing(host string, exact, dflt bool) (yes, no bool) {
	for _, e := range n.claimants {
		if !e.servesHost(host, exact) {
			continue
		}
		switch {
		case e.strip == stripYes || e.strip == stripUnset && dflt:
			yes = true
		default:
			no = true
		}
	}
	return yes, no
}

// repath returns paths with the tries under the keys of old and e (either
// nil) rebuilt from index, where one is needed: for a key that had one, or
// when old or e has a caddy.path label. Linear in the lists rebuilt.
func repath(paths *immutable.Map[string, *pathNode], index *immutable.Map[string, []*entry], old, e *entry, keys func(*entry) []string) *immutable.Map[string, *pathNode] {
	pathed := old != nil && old.pathed || e != nil && e.pathed
	var oldKeys []string
	if old != nil {
		oldKeys = keys(old)
	}
	set := setOf(oldKeys)
	visit := func(k string) {
		if _, had := paths.Get(k); !had && !pathed {
			return
		}
		list, _ := index.Get(k)
		if n := buildPaths(list); n != nil {
			paths = paths.Set(k, n)
		} else {
			paths = paths.Delete(k)
		}
	}
	for _, k := range oldKeys {
		visit(k)
	}
	if e != nil {
		for _, k := range keys(e) {
			if !set.has(oldKeys, k) {
				visit(k)
			}
		}
	}
	return paths
}

// buildIndexPaths is the tries of index for the keys of the instances of
// all with a caddy.path label (a full re-listing).
func buildIndexPaths(index *immutable.Map[string, []*entry], all []*entry, keys func(*entry) []string) *immutable.Map[string, *pathNode] {
	b := immutable.NewMapBuilder[string, *pathNode](newHasher())
	for _, e := range all {
		if !e.pathed {
			continue
		}
		for _, k := range keys(e) {
			if _, done := b.Get(k); done {
				continue
			}
			list, _ := index.Get(k)
			if n := buildPaths(list); n != nil {
				b.Set(k, n)
			}
		}
	}
	return b.Map()
}

// emptyPaths is an index of tries with none.
func emptyPaths() *immutable.Map[string, *pathNode] {
	return immutable.NewMap[string, *pathNode](newHasher())
}

// pathVerdict says why e, which serves host on the route, is not among
// the instances serving a request whose path's longest claimed prefix is
// prefix (R2d); for explain.
func (e *entry) pathVerdict(prefix string) string {
	switch {
	case e.note().badPath != "":
		return "caddy.path is not valid (R2d): " + e.note().badPath + "; it serves no path"
	case !e.pathed:
		return "has no caddy.path, and the request's path is under " + prefix + ", which another instance claims"
	case prefix == "/":
		return "caddy.path lists only other prefixes: " + ClipLabel(strings.TrimSpace(e.inst.Labels[LabelPath]))
	}
	return "caddy.path lists only other prefixes: " + ClipLabel(strings.TrimSpace(e.inst.Labels[LabelPath])) +
		"; the request's path is under " + prefix
}

// setViewPaths sets, in viewPaths, the trie of v from its list.
func setViewPaths(viewPaths map[*View]*pathNode, v *View, list []*entry) {
	if n := buildPaths(list); n != nil {
		viewPaths[v] = n
	} else {
		delete(viewPaths, v)
	}
}

// HasPaths reports whether an instance of the snapshot has a caddy.path
// label (R2d): without one, a request's path is never read.
func (s *Snapshot) HasPaths() bool {
	return s.hostPaths.Len() > 0 || s.wildPaths.Len() > 0 || len(s.viewPaths) > 0
}
