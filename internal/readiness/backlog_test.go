package readiness

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fullBacklog returns a loopback address that never accepts and never
// refuses: a listening socket with a backlog of 0 that nobody accepts on,
// its queue filled, so that the kernel drops further SYNs and a connection
// attempt waits for its timeout (an app stuck before accept, or a
// firewall that drops).
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for i := 0; ; i++ {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // full: this SYN was dropped
		}
		t.Cleanup(func() { conn.Close() })
		if i > 16 {
			t.Skip("the listen backlog of this system does not fill")
		}
	}
}
