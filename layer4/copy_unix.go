//go:build unix

package layer4

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// copyTCP copies src to dst through buf until src's end of input or an
// error, and returns how many bytes it wrote.
//
// It reads src only when there may be something to read: after a read
// that did not fill buf, the kernel has handed over all that had come, so
// the next read waits for the poller to report more, instead of asking
// the kernel first and hearing "nothing yet" (EAGAIN) as io.Copy does. For
// a request-and-answer protocol (Redis, Postgres) that is one system call
// fewer per message and direction, a large part of a proxy's work.
func copyTCP(dst, src *net.TCPConn, buf []byte) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	var written int64
	var opErr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return false // wait until the poller reports more
			case err != nil:
				opErr = os.NewSyscallError("read", err)
				return true
			case n == 0:
				return true // end of input
			}
			m, err := dst.Write(buf[:n])
			written += int64(m)
			if err != nil {
				opErr = err
				return true
			}
			if n < len(buf) {
				return false // all that had come is read: wait for more
			}
		}
	})
	if err == nil {
		err = opErr
	}
	return written, err
}
