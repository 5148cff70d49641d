package prewake

import (
	"net"
	"sync"
	"sync/atomic"
)

// listener is a listener wrapped by dicer_prewake.
type listener struct {
	net.Listener
	prewake *PreWake
}

// Accept returns the next connection, read for its ClientHello as the
// handshake reads it. It does not wait for any byte: the server's own
// goroutine for the connection does the reading.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &helloConn{Conn: c, prewake: l.prewake}, nil
}

// helloConn passes each byte read to the handshake, and a copy of the
// first ones to its helloReader until that is done.
type helloConn struct {
	net.Conn
	prewake *PreWake

	mu     sync.Mutex // the reader, should two goroutines read at once
	reader *helloReader
	done   atomic.Bool
	// onHello, if set, hears the name instead of prewake (tests).
	onHello func(name string)
}

// Read reads from the connection; the first reads also go to the
// ClientHello's reader, and once it has the server name, the pre-wake
// (R5n) runs, before the bytes go on to the handshake.
func (c *helloConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.done.Load() {
		c.look(p[:n])
	}
	return n, err
}

func (c *helloConn) look(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return
	}
	if c.reader == nil {
		c.reader = &helloReader{}
	}
	if !c.reader.feed(p) {
		return
	}
	name := c.reader.name
	c.reader = nil
	c.done.Store(true)
	if c.onHello != nil {
		c.onHello(name)
		return
	}
	c.prewake.hello(name, c.Conn.RemoteAddr())
}
