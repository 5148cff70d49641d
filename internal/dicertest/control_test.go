//go:build unix

package dicertest

import "testing"

// A run instance that names no IP gets the first 127.0.0.N from .100 that
// no instance has, and a full range says so.
func TestFreeRunIP(t *testing.T) {
	if ip, err := freeRunIP(map[string]string{"127.0.0.100": "a", "127.0.0.11": "b"}); ip != "127.0.0.101" || err != nil {
		t.Errorf("freeRunIP = %q, %v; want 127.0.0.101", ip, err)
	}
	full := map[string]string{}
	for n := firstRunHost; n <= lastRunHost; n++ {
		ip, _ := freeRunIP(full)
		full[ip] = "x"
	}
	if ip, err := freeRunIP(full); err == nil {
		t.Errorf("freeRunIP on a full range = %q; want an error", ip)
	}
}
