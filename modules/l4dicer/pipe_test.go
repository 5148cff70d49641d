package l4dicer

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	l4 "github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"
)

// hidden hides a connection's type, as a wrapper of caddy-l4's does.
type hidden struct{ net.Conn }

func (h hidden) CloseWrite() error { return h.Conn.(*net.TCPConn).CloseWrite() }

// echoUpstream listens on loopback and echoes one connection's bytes,
// then shuts down its writing side.
func echoUpstream(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		_, _ = io.Copy(c, c)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	return ln
}

func TestPipe_copies_both_ways_after_the_matched_prefix_and_half_closes(t *testing.T) {
	for name, wrap := range map[string]func(net.Conn) net.Conn{
		"between the sockets":           func(c net.Conn) net.Conn { return c },
		"through caddy-l4's connection": func(c net.Conn) net.Conn { return hidden{c} },
	} {
		t.Run(name, func(t *testing.T) {
			upLn := echoUpstream(t)
			proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer proxyLn.Close()
			done := make(chan error, 1)
			go func() {
				down, err := proxyLn.Accept()
				if err != nil {
					done <- err
					return
				}
				defer down.Close()
				up, err := net.Dial("tcp", upLn.Addr().String())
				if err != nil {
					done <- err
					return
				}
				defer up.Close()
				// caddy-l4's matchers read "PRE" ahead: it must go first.
				cx := l4.WrapConnection(wrap(down), []byte("PRE"), zap.NewNop())
				var b1, b2 [copyBufSize]byte
				if err := sendPrefix(up, cx, []byte("FIRST-"), b1[:]); err != nil {
					done <- err
					return
				}
				pipe(cx, up, b1[:], b2[:])
				done <- nil
			}()
			client, err := net.Dial("tcp", proxyLn.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			_ = client.SetDeadline(time.Now().Add(time.Minute))
			payload := make([]byte, 4<<20) // many full buffers
			for i := range payload {
				payload[i] = byte(rand.Uint32())
			}
			go func() {
				_, _ = client.Write(payload)
				_ = client.(*net.TCPConn).CloseWrite() // the answers still come
			}()
			got, err := io.ReadAll(client)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]byte("FIRST-PRE"), payload...)
			if !bytes.Equal(got, want) {
				t.Fatalf("echoed %d bytes, want %d; equal prefix %d", len(got), len(want), commonPrefix(got, want))
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the pipe did not end after both sides closed")
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestPipe_an_answer_and_close_together_end_the_client_s_read(t *testing.T) {
	// An HTTP/1.0 server answers and closes at once: its data and its end
	// of input reach the proxy together, and the client, which has not
	// ended its side, must see both.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upLn.Close()
	go func() {
		for {
			c, err := upLn.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("answer"))
			c.Close()
		}
	}()
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxyLn.Close()
	go func() {
		for {
			down, err := proxyLn.Accept()
			if err != nil {
				return
			}
			go func() {
				defer down.Close()
				up, err := net.Dial("tcp", upLn.Addr().String())
				if err != nil {
					return
				}
				defer up.Close()
				var b1, b2 [copyBufSize]byte
				pipe(l4.WrapConnection(down, nil, zap.NewNop()), up, b1[:], b2[:])
			}()
		}
	}()
	for range 20 { // the data and the end arrive together in most tries
		client, err := net.Dial("tcp", proxyLn.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = client.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(client)
		client.Close()
		if err != nil {
			t.Fatalf("reading the answer: %v (the end of input was lost)", err)
		}
		if string(got) != "answer" {
			t.Fatalf("got %q, want %q", got, "answer")
		}
	}
}
