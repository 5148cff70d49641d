package caddydicer

import (
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// The namespaces of Caddy's modules that a backend provides.
const (
	upstreamsNamespace  = "http.reverse_proxy.upstreams"
	permissionNamespace = "tls.permission"
)

// backend is one kind of daemon the plugin follows (Dicer, Docker,
// Swarm): an upstream source and an on-demand TLS permission, each a Caddy
// module named after the kind. Caddy's module registry is the registry of
// backends: a backend's file registers its two modules (one embedding
// upstreamSource, one embedding hostPermission), and every list of
// backends the plugin shows (the `caddy dicer` help and messages,
// `permission daemons` and its errors) is read from it by backends, so a
// new backend is never left out of one.
type backend struct {
	// kind names the daemon: its modules' name, and the kind in metrics,
	// the admin API and logs.
	kind string
	// upstreams and permission are its modules' IDs ("" for none).
	upstreams, permission caddy.ModuleID
}

// daemonSource is an upstream source module that follows one daemon: the
// `http.reverse_proxy.upstreams.*` modules that implement it are backends'.
type daemonSource interface {
	daemonSource() *upstreamSource
}

func (s *upstreamSource) daemonSource() *upstreamSource { return s }

// backends lists the registered backends, by kind.
func backends() []backend {
	var list []backend
	at := func(kind string) *backend {
		i := slices.IndexFunc(list, func(b backend) bool { return b.kind == kind })
		if i < 0 {
			list = append(list, backend{kind: kind})
			i = len(list) - 1
		}
		return &list[i]
	}
	for _, info := range caddy.GetModules(upstreamsNamespace) {
		if _, ok := info.New().(daemonSource); ok {
			at(info.ID.Name()).upstreams = info.ID
		}
	}
	for _, info := range caddy.GetModules(permissionNamespace) {
		if _, ok := info.New().(daemonPermission); ok {
			at(info.ID.Name()).permission = info.ID
		}
	}
	slices.SortFunc(list, func(a, b backend) int { return strings.Compare(a.kind, b.kind) })
	return list
}

// backendKinds returns the kinds of the registered backends that have a
// module in namespace ("": any), sorted.
func backendKinds(namespace string) []string {
	var kinds []string
	for _, b := range backends() {
		if namespace == "" ||
			namespace == upstreamsNamespace && b.upstreams != "" ||
			namespace == permissionNamespace && b.permission != "" {
			kinds = append(kinds, b.kind)
		}
	}
	return kinds
}

// oneOf joins kinds for a sentence: "dicer, docker or swarm".
func oneOf(kinds []string) string {
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " or " + kinds[len(kinds)-1]
}

// allOf joins kinds for a sentence: "dicer, docker and swarm".
func allOf(kinds []string) string {
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}
