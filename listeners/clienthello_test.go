package listeners

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// clientHello is a real ClientHello naming name ("": no SNI).
func clientHello(t testing.TB, name string) []byte { return testkit.ClientHello(t, name) }

// R5n: the server name comes out of a real ClientHello however the reads
// cut it, and the reader takes nothing from the bytes.
func TestHelloReader_R5n_reads_the_server_name_in_any_cut(t *testing.T) {
	for _, name := range []string{"app.example.test", "xn--bcher-kva.example", strings.Repeat("a", 63) + ".example"} {
		hello := clientHello(t, name)
		for _, step := range []int{1, 2, 5, 7, 100, len(hello)} {
			var r helloReader
			copyOf := append([]byte(nil), hello...)
			done := false
			for i := 0; i < len(hello) && !done; i += step {
				done = r.feed(hello[i:min(i+step, len(hello))])
			}
			if !done || r.name != name {
				t.Errorf("%s in reads of %d bytes: done %v, name %q", name, step, done, r.name)
			}
			if !bytes.Equal(copyOf, hello) {
				t.Fatal("the reader changed the bytes")
			}
		}
	}
}

// R5n: what is not a ClientHello with a server name is done at once with
// none: plain HTTP, no SNI, another record type, a giant length.
func TestHelloReader_R5n_no_name(t *testing.T) {
	for what, b := range map[string][]byte{
		"plain HTTP":      []byte("GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"),
		"no SNI":          clientHello(t, ""),
		"alert record":    {21, 3, 1, 0, 2, 2, 40},
		"huge record":     {22, 3, 1, 0xff, 0xff},
		"huge hello":      {22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff},
		"server hello":    {22, 3, 3, 0, 4, 2, 0, 0, 0},
		"empty extension": append([]byte{22, 3, 1, 0, 42, 1, 0, 0, 38, 3, 3}, make([]byte, 36)...),
	} {
		var r helloReader
		if !r.feed(b) || r.name != "" {
			t.Errorf("%s: done %v, name %q", what, r.done, r.name)
		}
	}
}

// R5n: a reader keeps at most maxHello bytes, then gives up.
func TestHelloReader_R5n_bounded(t *testing.T) {
	var r helloReader
	head := []byte{22, 3, 1, 0x40, 0, 1, 0x00, 0x1f, 0xfc} // a 16 KiB record, a hello of maxHello with its header
	if r.feed(head) {
		t.Fatal("done after the header")
	}
	chunk := make([]byte, 1024)
	for i := 0; i < 20 && !r.done; i++ {
		r.feed(chunk)
		if len(r.buf) > maxHello {
			t.Fatalf("kept %d bytes", len(r.buf))
		}
	}
	if !r.done || r.name != "" {
		t.Errorf("done %v, name %q", r.done, r.name)
	}
}

// FuzzHelloReader: whatever the bytes and however cut, the reader neither
// panics nor keeps more than maxHello bytes, and it reads a name only
// from a well-formed hello.
func FuzzHelloReader(f *testing.F) {
	f.Add(clientHello(f, "app.example.test"), uint8(3))
	f.Add([]byte("GET / HTTP/1.1\r\n"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		s := int(step) + 1
		var r helloReader
		for i := 0; i < len(b) && !r.done; i += s {
			r.feed(b[i:min(i+s, len(b))])
			if len(r.buf) > maxHello {
				t.Fatalf("kept %d bytes", len(r.buf))
			}
		}
	})
}

// The wrapper's connection passes every byte on as read, and reads the
// name once.
func TestHelloConn_R5n_passes_bytes_on(t *testing.T) {
	hello := clientHello(t, "app.example.test")
	client, server := net.Pipe()
	defer client.Close()
	var got []string
	p := &PreWake{}
	c := &helloConn{Conn: server, prewake: p}
	c.onHello = func(name string) { got = append(got, name) }
	go func() {
		for i := 0; i < len(hello); i += 100 {
			_, _ = client.Write(hello[i:min(i+100, len(hello))])
		}
		_, _ = client.Write([]byte("more"))
		client.Close()
	}()
	read, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read, append(hello, "more"...)) {
		t.Errorf("read %d bytes, want the %d written", len(read), len(hello)+4)
	}
	if len(got) != 1 || got[0] != "app.example.test" {
		t.Errorf("names heard: %q", got)
	}
}
