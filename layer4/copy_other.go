//go:build !unix

package layer4

import (
	"io"
	"net"
)

// copyTCP copies src to dst until src's end of input or an error.
func copyTCP(dst, src *net.TCPConn, buf []byte) (int64, error) {
	return io.CopyBuffer(dst, src, buf)
}
