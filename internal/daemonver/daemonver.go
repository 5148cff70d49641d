// Package daemonver says which daemon version a connection reached and
// what will not work with it (R9a): the Docker Engine's /version and
// Dicer's GetHostInfo, asked once per session, logged once, shown by the
// admin API, `caddy dicer daemons` and the dashboard.
package daemonver

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is what a daemon says of itself. Every field is the daemon's
// own text, bounded in size (a daemon's answer is not trusted further).
type Version struct {
	// Product names the software: "Docker Engine", "Podman Engine",
	// "dicerd".
	Product string `json:"product,omitempty"`
	// Version is its version, e.g. "28.5.2".
	Version string `json:"version,omitempty"`
	// API is the Engine API version it serves ("1.51"); "" for Dicer.
	API string `json:"api,omitempty"`
}

// maxField bounds each field, in bytes.
const maxField = 64

// New is a Version of these fields, each cut to 64 bytes.
func New(product, version, api string) Version {
	return Version{Product: clip(product), Version: clip(version), API: clip(api)}
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxField {
		s = s[:maxField]
	}
	return strings.ToValidUTF8(s, "?")
}

// Zero reports a Version never told.
func (v Version) Zero() bool { return v == Version{} }

// String is the version as one log field: "Docker Engine 28.5.2 (API 1.51)".
func (v Version) String() string {
	s := strings.TrimSpace(v.Product + " " + v.Version)
	if v.API != "" {
		s += " (API " + v.API + ")"
	}
	return s
}

// MinEngineAPI is the oldest Engine API version the Docker adapters are
// tested with (Docker 20.10).
const MinEngineAPI = "1.41"

// Warnings names, one line each, what will not work with the daemon of
// kind ("dicer", "docker", "swarm") at version v; none when all will.
func Warnings(kind string, v Version) []string {
	var out []string
	switch kind {
	case "docker", "swarm":
		if v.API != "" && OlderAPI(v.API, MinEngineAPI) {
			out = append(out, fmt.Sprintf("Engine API %s is older than %s (Docker 20.10), the oldest this plugin is tested with: "+
				"the health states it reads from listings and events (R1) and the event filters it asks for may be missing", v.API, MinEngineAPI))
		}
		if v.API == "" {
			out = append(out, "the Engine did not say its API version: nothing is known of what it supports")
		}
	case "dicer":
		if v.Version == "" {
			out = append(out, "Dicer did not say its version: standby (scale to zero, R5) needs a Dicer with StandbyInstance, "+
				"and wakes fail with Unimplemented on one without")
		}
	}
	return out
}

// OlderAPI reports whether the Engine API version a is older than b
// ("1.40" < "1.41"); a version that does not parse is not older.
func OlderAPI(a, b string) bool {
	am, an, ok1 := majorMinor(a)
	bm, bn, ok2 := majorMinor(b)
	if !ok1 || !ok2 {
		return false
	}
	return am < bm || am == bm && an < bn
}

func majorMinor(s string) (int, int, bool) {
	maj, min, ok := strings.Cut(s, ".")
	if !ok {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	return a, b, err1 == nil && err2 == nil
}
