package dockertest

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// FreezableProxy is a unix socket that forwards every connection to the
// Engine, and whose open connections a test can freeze: they stay open,
// but nothing flows through them any more (what a hung socket proxy does
// to a long event stream), while connections opened after the freeze flow
// as usual, so the Engine still answers new calls.
type FreezableProxy struct {
	path   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	frozen map[net.Conn]bool // client side -> frozen
	thaw   *sync.Cond
	closed bool
	conns  []net.Conn
}

// NewFreezableProxy starts a proxy to the Engine at EngineHost (unix://
// only), closed when the test ends.
func NewFreezableProxy(t testing.TB) *FreezableProxy {
	t.Helper()
	u, err := url.Parse(EngineHost())
	if err != nil || u.Scheme != "unix" {
		t.Fatalf("dockertest: a freezable proxy needs a unix:// Engine, not %q", EngineHost())
	}
	dir, err := os.MkdirTemp("", "cdt")
	if err != nil {
		t.Fatal(err)
	}
	p := &FreezableProxy{path: filepath.Join(dir, "fz.sock"), target: u.Path, frozen: map[net.Conn]bool{}}
	p.thaw = sync.NewCond(&p.mu)
	if p.ln, err = net.Listen("unix", p.path); err != nil {
		t.Fatal(err)
	}
	go p.accept()
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		conns := p.conns
		p.thaw.Broadcast()
		p.mu.Unlock()
		_ = p.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
		_ = os.RemoveAll(dir)
	})
	return p
}

// Host is the proxy's endpoint.
func (p *FreezableProxy) Host() string { return "unix://" + p.path }

// Freeze stops every connection open now: bytes already read are held,
// nothing more is written either way, and the sockets stay open. It
// returns how many connections it froze.
func (p *FreezableProxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.frozen {
		p.frozen[c] = true
	}
	return len(p.frozen)
}

func (p *FreezableProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		e, err := net.Dial("unix", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = e.Close()
			return
		}
		p.frozen[c] = false
		p.conns = append(p.conns, c, e)
		p.mu.Unlock()
		go p.pipe(c, e, c)
		go p.pipe(c, c, e)
	}
}

// pipe copies src to dst, holding each chunk while key is frozen.
func (p *FreezableProxy) pipe(key, dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.frozen, key)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen[key] && !p.closed {
				p.thaw.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
