package prewake

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/crypto/cryptobyte"

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
		if r.fed > maxHello || cap(r.sni) > maxHello {
			t.Fatalf("read %d bytes, kept %d", r.fed, cap(r.sni))
		}
	}
	if !r.done || r.name != "" {
		t.Errorf("done %v, name %q", r.done, r.name)
	}
}

// R5n: the reader keeps no more of a server_name extension than its
// length, nor more than maxHello, however it comes: a name of 7,000 bytes
// (an outsider's largest) read a byte at a time or in reads of 512 grew
// the copy past both (9,472 bytes of room for an extension of 7,005).
func TestHelloReader_R5n_keeps_no_more_than_the_extension(t *testing.T) {
	name := strings.Repeat("a", 7000)
	hello := paddedHello(name, 10, true)
	const ext = 2 + 1 + 2 + 7000 // the list's length, host_name, the name's length, the name
	for _, step := range []int{1, 512, 3000} {
		var r helloReader
		most := 0
		for i := 0; i < len(hello) && !r.done; i += step {
			r.feed(hello[i:min(i+step, len(hello))])
			most = max(most, cap(r.sni))
		}
		if !r.done || r.name != name {
			t.Fatalf("reads of %d: done %v, a name of %d bytes", step, r.done, len(r.name))
		}
		if most > ext || most > maxHello {
			t.Errorf("reads of %d: kept room for %d bytes of a server_name extension of %d (maxHello %d)", step, most, ext, maxHello)
		}
	}
}

// FuzzHelloReader: whatever the bytes and however cut, the reader neither
// panics nor reads or keeps more than maxHello bytes, and it reads the
// name the reader of cfa1203 read when fed a byte at a time (which sees
// no byte past the hello's end): a name only from a well-formed hello.
func FuzzHelloReader(f *testing.F) {
	f.Add(clientHello(f, "app.example.test"), uint8(3))
	f.Add(paddedHello("app.example.test", 3000, true), uint8(200))
	f.Add(paddedHello("app.example.test", 3000, false), uint8(7))
	f.Add([]byte("GET / HTTP/1.1\r\n"), uint8(1))
	f.Add(paddedHello(strings.Repeat("a", 7000), 10, true), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		s := int(step) + 1
		var r helloReader
		for i := 0; i < len(b) && !r.done; i += s {
			r.feed(b[i:min(i+s, len(b))])
			if r.fed > maxHello || cap(r.sni) > maxHello {
				t.Fatalf("read %d bytes, kept %d", r.fed, cap(r.sni))
			}
		}
		var base baseHelloReader
		for i := 0; i < len(b) && !base.done; i++ {
			base.feed(b[i : i+1])
		}
		if r.done != base.done || r.name != base.name {
			t.Fatalf("in reads of %d: done %v, name %q; the reader of cfa1203 byte by byte: done %v, name %q",
				s, r.done, r.name, base.done, base.name)
		}
	})
}

// paddedHello is a ClientHello naming name with a padding extension of
// pad bytes (RFC 7685) before the server_name extension, or after it.
func paddedHello(name string, pad int, padFirst bool) []byte {
	var b cryptobyte.Builder
	b.AddUint8(22) // handshake
	b.AddUint16(0x0301)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(1) // client_hello
		b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(0x0303)
			b.AddBytes(make([]byte, 32))
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 32)) })
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				padding := func() {
					b.AddUint16(21)
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, pad)) })
				}
				if padFirst {
					padding()
				}
				b.AddUint16(0) // server_name
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
						b.AddUint8(0) // host_name
						b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(name)) })
					})
				})
				if !padFirst {
					padding()
				}
			})
		})
	})
	return b.BytesOrPanic()
}

// R5n: a hello trickled a byte at a time costs work and copies in
// proportion to its length, not its square: the bytes allocated over the
// whole trickle stay under one per byte fed (the reader of cfa1203 copied
// the hello so far on every read: about half the hello per byte).
func TestHelloReader_R5n_trickle_is_linear(t *testing.T) {
	for _, hello := range [][]byte{clientHello(t, "app.example.test"), paddedHello("app.example.test", 4000, true)} {
		perByte := allocatedPerByte(func() {
			var r helloReader
			for i := 0; i < len(hello) && !r.feed(hello[i:i+1]); i++ {
			}
			if r.name != "app.example.test" {
				t.Fatalf("name %q", r.name)
			}
		}, len(hello))
		t.Logf("a %d-byte hello trickled: %.2f bytes allocated per byte fed", len(hello), perByte)
		if perByte > 1 {
			t.Errorf("a %d-byte hello trickled a byte at a time: %.1f bytes allocated per byte fed, want at most 1", len(hello), perByte)
		}
	}
}

// allocatedPerByte is the heap allocated by run, over 5 runs, per one of
// n bytes.
func allocatedPerByte(run func(), n int) float64 {
	const runs = 5
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		run()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / runs / float64(n)
}

// R5n: a connection waiting with all but the end of its hello holds
// little: 1,000 readers fed all but the last byte of a 6 KiB hello, in
// reads of 512 bytes, keep under 256 bytes of heap each (the reader of
// cfa1203 kept the records so far, and more: 6 KiB and up each).
func TestHelloReader_R5n_waiting_connection_memory(t *testing.T) {
	const n = 1000
	hello := paddedHello("app.example.test", 6000, true)
	readers := make([]*helloReader, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range readers {
		r := new(helloReader)
		rest := hello[:len(hello)-1]
		for len(rest) > 0 {
			k := min(512, len(rest))
			if r.feed(rest[:k]) {
				t.Fatalf("done before the hello's end, name %q", r.name)
			}
			rest = rest[k:]
		}
		readers[i] = r
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perReader := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("a reader waiting with %d of a %d-byte hello: %d bytes of heap", len(hello)-1, len(hello), perReader)
	if perReader > 256 {
		t.Errorf("a reader waiting with %d bytes of a hello holds %d bytes of heap, want at most 256", len(hello)-1, perReader)
	}
	for _, r := range readers {
		if !r.feed(hello[len(hello)-1:]) || r.name != "app.example.test" {
			t.Fatalf("the last byte: done %v, name %q", r.done, r.name)
		}
	}
}

// BenchmarkHelloReader: a real ClientHello read whole and a byte at a
// time, by the incremental reader and by the reader of cfa1203 (base).
func BenchmarkHelloReader(b *testing.B) {
	hello := clientHello(b, "app.example.test")
	for _, step := range []int{len(hello), 1} {
		cut := "whole"
		if step == 1 {
			cut = "trickled"
		}
		b.Run(cut+"/incremental", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(hello)))
			for b.Loop() {
				var r helloReader
				for i := 0; i < len(hello) && !r.feed(hello[i:min(i+step, len(hello))]); i += step {
				}
			}
		})
		b.Run(cut+"/base", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(hello)))
			for b.Loop() {
				var r baseHelloReader
				for i := 0; i < len(hello) && !r.feed(hello[i:min(i+step, len(hello))]); i += step {
				}
			}
		})
	}
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
