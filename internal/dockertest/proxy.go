package dockertest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// SocketProxy is a unix socket that forwards every connection to the
// Engine, and that a test can cut: it stands for an Engine restart or a
// broken connection without touching the real Engine.
type SocketProxy struct {
	path   string
	ln     net.Listener
	dial   func() (net.Conn, error)
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]net.Conn // client side -> Engine side
	total  int
	wg     sync.WaitGroup
	closed bool
}

// NewSocketProxy starts a proxy to the Engine at EngineHost (unix:// or
// tcp://), closed when the test ends.
func NewSocketProxy(t testing.TB) *SocketProxy {
	t.Helper()
	p, err := StartSocketProxy(EngineHost())
	if err != nil {
		t.Fatalf("dockertest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartSocketProxy starts a proxy to the Engine at target (unix:///path or
// tcp://host:port); the caller closes it.
func StartSocketProxy(target string) (*SocketProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("engine address %q: %w", target, err)
	}
	var dial func() (net.Conn, error)
	switch u.Scheme {
	case "unix":
		path := u.Path
		dial = func() (net.Conn, error) { return net.Dial("unix", path) }
	case "tcp":
		host := u.Host
		dial = func() (net.Conn, error) { return net.Dial("tcp", host) }
	default:
		return nil, fmt.Errorf("engine address %q: only unix:// and tcp:// can be proxied", target)
	}
	// A short directory: a socket path holds at most 108 bytes.
	dir, err := os.MkdirTemp("", "cdt")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "e.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &SocketProxy{path: path, ln: ln, dial: dial, conns: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Host is the proxy's endpoint, for a client's or the adapter's Host.
func (p *SocketProxy) Host() string { return "unix://" + p.path }

// Accepted is the number of connections accepted so far (refused ones
// included).
func (p *SocketProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Cut closes every open connection (both sides), as an Engine restart
// would, and returns how many there were. New connections are still
// forwarded unless the proxy is down.
func (p *SocketProxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c, e := range p.conns {
		_ = c.Close()
		_ = e.Close()
		delete(p.conns, c)
		n++
	}
	return n
}

// SetDown makes the proxy refuse (accept and close at once) every new
// connection while down is true, as an Engine that is not running; going
// down also cuts the open connections.
func (p *SocketProxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.Cut()
	}
}

// Close stops the proxy and closes its connections.
func (p *SocketProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
	_ = os.RemoveAll(filepath.Dir(p.path))
}

func (p *SocketProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.total++
		down, closed := p.down, p.closed
		p.mu.Unlock()
		if down || closed {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *SocketProxy) forward(client net.Conn) {
	defer p.wg.Done()
	engine, err := p.dial()
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = engine.Close()
		return
	}
	p.conns[client] = engine
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close is not enough for HTTP keep-alive: close both.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(engine, client)
	go pipe(client, engine)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	p.mu.Unlock()
}
