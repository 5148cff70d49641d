package diceradmin

import "testing"

func TestBackends_sentences(t *testing.T) {
	for _, tc := range []struct {
		kinds      []string
		one, every string
	}{
		{nil, "", ""},
		{[]string{"dicer"}, "dicer", "dicer"},
		{[]string{"dicer", "docker"}, "dicer or docker", "dicer and docker"},
		{[]string{"dicer", "docker", "swarm"}, "dicer, docker or swarm", "dicer, docker and swarm"},
	} {
		if got := OneOf(tc.kinds); got != tc.one {
			t.Errorf("OneOf(%q) = %q, want %q", tc.kinds, got, tc.one)
		}
		if got := AllOf(tc.kinds); got != tc.every {
			t.Errorf("AllOf(%q) = %q, want %q", tc.kinds, got, tc.every)
		}
	}
}
