package testkit

import (
	"net"
	"testing"
)

// FreePort is a TCP port that was free on ip a moment ago ("0.0.0.0":
// on every address of the host): a test binds Caddy, a server or a
// published port to it.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
