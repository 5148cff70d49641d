package diceradmin

import (
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// The namespaces of Caddy's modules that a backend provides.
const (
	UpstreamsNamespace  = "http.reverse_proxy.upstreams"
	PermissionNamespace = "tls.permission"
)

// Follower is a module of this plugin that follows one daemon: an
// upstream source or a permission of one backend. The modules that
// implement it in the two namespaces above are the backends.
type Follower interface {
	// FollowsDaemon marks the module.
	FollowsDaemon()
}

// Backend is one kind of daemon the plugin follows (Dicer, Docker,
// Swarm): an upstream source and an on-demand TLS permission, each a Caddy
// module named after the kind. Caddy's module registry is the registry of
// backends: a backend's files register its two modules, and every list of
// backends the plugin shows (the `caddy dicer` help and messages,
// `permission daemons` and its errors) is read from it by Backends, so a
// new backend is never left out of one.
type Backend struct {
	// Kind names the daemon: its modules' name, and the kind in metrics,
	// the admin API and logs.
	Kind string
	// Upstreams and Permission are its modules' IDs ("" for none).
	Upstreams, Permission caddy.ModuleID
}

// Backends lists the registered backends, by kind.
func Backends() []Backend {
	var list []Backend
	at := func(kind string) *Backend {
		i := slices.IndexFunc(list, func(b Backend) bool { return b.Kind == kind })
		if i < 0 {
			list = append(list, Backend{Kind: kind})
			i = len(list) - 1
		}
		return &list[i]
	}
	for _, info := range caddy.GetModules(UpstreamsNamespace) {
		if _, ok := info.New().(Follower); ok {
			at(info.ID.Name()).Upstreams = info.ID
		}
	}
	for _, info := range caddy.GetModules(PermissionNamespace) {
		if _, ok := info.New().(Follower); ok {
			at(info.ID.Name()).Permission = info.ID
		}
	}
	slices.SortFunc(list, func(a, b Backend) int { return strings.Compare(a.Kind, b.Kind) })
	return list
}

// Kinds returns the kinds of the registered backends that have a module
// in namespace ("": any), sorted.
func Kinds(namespace string) []string {
	var kinds []string
	for _, b := range Backends() {
		if namespace == "" ||
			namespace == UpstreamsNamespace && b.Upstreams != "" ||
			namespace == PermissionNamespace && b.Permission != "" {
			kinds = append(kinds, b.Kind)
		}
	}
	return kinds
}

// OneOf joins kinds for a sentence: "dicer, docker or swarm".
func OneOf(kinds []string) string {
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " or " + kinds[len(kinds)-1]
}

// AllOf joins kinds for a sentence: "dicer, docker and swarm".
func AllOf(kinds []string) string {
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}
