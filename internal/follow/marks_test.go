package follow

import "testing"

// R6b: the events of one stop (a kill with SIGKILL, then the die with code
// 137) that reach the marks before the runner applies them leave with the
// first one's why, as they do when the runner applies each in turn; a
// start in between or after starts afresh.
func TestMarks_R6b_first_why_of_a_stop_kept(t *testing.T) {
	m := newMarks()
	m.set("c1", true, "killed with SIGKILL")
	m.set("c1", true, "exited with code 137 (killed by SIGKILL)")
	m.set("c2", true, "")
	m.set("c2", true, "exited with code 1 (crashed or failed)")
	m.set("c3", true, "sent SIGTERM to stop")
	m.set("c3", false, "")
	m.set("c3", true, "exited with code 137 (killed by SIGKILL)")
	got := m.take()
	want := map[string]mark{
		"c1": {stopping: true, why: "killed with SIGKILL"},
		"c2": {stopping: true, why: "exited with code 1 (crashed or failed)"},
		"c3": {stopping: true, why: "exited with code 137 (killed by SIGKILL)"},
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: got %+v, want %+v", id, got[id], w)
		}
	}
}
