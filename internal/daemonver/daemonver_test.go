package daemonver

import (
	"strings"
	"testing"
)

// R9a: an Engine API older than the oldest tested is warned of, naming
// what may not work; a current one and Dicer with a version are not; the
// daemon's text is bounded.
func TestWarnings_R9a(t *testing.T) {
	for _, tc := range []struct {
		kind string
		v    Version
		want string // a snippet of the one warning, "" for none
	}{
		{"docker", New("Docker Engine", "28.5.2", "1.51"), ""},
		// Docker 29 serves 1.55 (1.44 at the oldest); the client speaks
		// 1.51 to it (make test-engine29).
		{"docker", New("Docker Engine", "29.0.0", "1.55"), ""},
		{"docker", New("Docker Engine", "19.03.15", "1.40"), "older than 1.41"},
		{"swarm", New("Docker Engine", "18.09", "1.39"), "health states"},
		{"docker", New("Podman Engine", "5.4.2", ""), "did not say its API version"},
		{"dicer", New("dicerd", "0.9.1", ""), ""},
		{"dicer", New("dicerd", "", ""), "StandbyInstance"},
	} {
		got := Warnings(tc.kind, tc.v)
		if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)) {
			t.Errorf("%s %v: warnings %q, want one with %q", tc.kind, tc.v, got, tc.want)
		}
	}
	if v := New(strings.Repeat("x", 1000), "1\xff", "1.51"); len(v.Product) != maxField || v.Version != "1?" {
		t.Errorf("unbounded or invalid text kept: %q", v)
	}
	if s := New("Docker Engine", "28.5.2", "1.51").String(); s != "Docker Engine 28.5.2 (API 1.51)" {
		t.Errorf("String() = %q", s)
	}
}
