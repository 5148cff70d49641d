package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// maxTrackedBytes bounds a tracked file: the largest source here (the
// generated protobuf code) is under 100 KB; anything past this is an
// artefact or data that belongs elsewhere.
const maxTrackedBytes = 256 << 10

// executableMagic are the first bytes of the binaries a build here makes
// (ELF on Linux, Mach-O and PE elsewhere).
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xcf, 0xfa, 0xed, 0xfe}, {0xce, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf},
	[]byte("MZ"),
}

var imageExt = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true, ".ico": true, ".bmp": true}

// Nothing built is committed: no tracked file is an executable, an image
// outside docs/, or larger than maxTrackedBytes; each one found is named.
func TestRepo_no_built_file_is_tracked(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git work tree (git ls-files: %v)", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		if bad := trackedProblem(name); bad != "" {
			t.Errorf("tracked file %s: %s; remove it (git rm --cached) and let .gitignore cover where it was written", name, bad)
		}
	}
}

// trackedProblem says what is wrong with the tracked file name, or "".
func trackedProblem(name string) string {
	fi, err := os.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() {
		return "" // deleted in the work tree, or a link
	}
	if fi.Size() > maxTrackedBytes {
		return "larger than 256 KiB"
	}
	if imageExt[strings.ToLower(path.Ext(name))] && !strings.HasPrefix(name, "docs/") {
		return "an image outside docs/"
	}
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	for _, m := range executableMagic {
		if n >= len(m) && bytes.Equal(head[:len(m)], m) {
			return "an executable"
		}
	}
	return ""
}
