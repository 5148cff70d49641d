//go:build e2e && linux

package firstbyte

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// dialPort is where a client in the namespace connects to reach Caddy's
// port: the port itself on this end of the link when the kernel delays
// (netem), else a relay on this end that delays and forwards to it.
func (l *delayedLink) dialPort(t *testing.T, port int) int {
	if l.netem {
		return port
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(l.host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, target, l.delay)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// relay forwards a client's connection to target, each chunk of bytes
// delay later than it came, in both directions.
func relay(client net.Conn, target string, delay time.Duration) {
	defer client.Close()
	upstream, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	go func() { delayedCopy(upstream, client, delay); done <- struct{}{} }()
	go func() { delayedCopy(client, upstream, delay); done <- struct{}{} }()
	<-done
}

// delayedCopy copies src to dst, each chunk written delay after it was
// read, in order; it half-closes dst when src ends.
func delayedCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			_, _ = io.Copy(io.Discard, src)
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
