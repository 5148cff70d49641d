package prewake

import (
	"golang.org/x/crypto/cryptobyte"
)

// The ClientHello reader as it was at cfa1203 (the whole hello parsed
// again on every read, from a second copy): the reference of
// FuzzHelloReader, which checks that the incremental one reads the same
// names, and the base of BenchmarkHelloReader's ratio.

// baseHelloReader reads the server name of a TLS ClientHello from the first
// bytes of a connection as they pass (feed), without taking any: the
// handshake's own reader gets every byte. It is done once it has the
// name, or knows there is none to read (not TLS, no SNI, malformed, too
// long).
type baseHelloReader struct {
	buf  []byte // the TLS records so far
	done bool
	name string
}

// feed gives r the next bytes read from the connection; it returns true
// once r is done, with its server name in r.name ("" for none).
func (r *baseHelloReader) feed(p []byte) bool {
	if r.done {
		return true
	}
	if len(r.buf)+len(p) > maxHello {
		p = p[:maxHello-len(r.buf)]
	}
	r.buf = append(r.buf, p...)
	msg, complete, ok := baseHandshakeMessage(r.buf)
	switch {
	case !ok:
		r.finish("")
	case complete:
		r.finish(baseServerName(msg))
	case len(r.buf) >= maxHello:
		r.finish("")
	}
	return r.done
}

func (r *baseHelloReader) finish(name string) {
	r.done, r.name, r.buf = true, name, nil
}

// baseHandshakeMessage joins the handshake records at the start of b into the
// first handshake message: complete once it is all there, !ok once b
// cannot start with a ClientHello (a record of another type, a message
// of another type).
func baseHandshakeMessage(b []byte) (msg []byte, complete, ok bool) {
	var hs []byte
	for len(b) > 0 {
		if b[0] != 22 { // handshake
			return nil, false, false
		}
		if len(b) < 5 {
			break
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > 1<<14 {
			return nil, false, false
		}
		if len(b) < 5+n {
			hs = append(hs, b[5:]...)
			break
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
	}
	if len(hs) > 0 && hs[0] != 1 { // client_hello
		return nil, false, false
	}
	if len(hs) < 4 {
		return nil, false, true
	}
	n := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
	if 4+n > maxHello {
		return nil, false, false
	}
	if len(hs) < 4+n {
		return nil, false, true
	}
	return hs[4 : 4+n], true, true
}

// serverName is the host_name of a ClientHello body's server_name
// extension (RFC 6066), "" if it has none or is malformed.
func baseServerName(body []byte) string {
	s := cryptobyte.String(body)
	var version uint16
	var random, session, suites, compression, exts cryptobyte.String
	if !s.ReadUint16(&version) || !s.ReadBytes((*[]byte)(&random), 32) ||
		!s.ReadUint8LengthPrefixed(&session) || !s.ReadUint16LengthPrefixed(&suites) ||
		!s.ReadUint8LengthPrefixed(&compression) || !s.ReadUint16LengthPrefixed(&exts) {
		return ""
	}
	for !exts.Empty() {
		var typ uint16
		var ext cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&ext) {
			return ""
		}
		if typ != 0 { // server_name
			continue
		}
		var list cryptobyte.String
		if !ext.ReadUint16LengthPrefixed(&list) {
			return ""
		}
		for !list.Empty() {
			var kind uint8
			var name cryptobyte.String
			if !list.ReadUint8(&kind) || !list.ReadUint16LengthPrefixed(&name) {
				return ""
			}
			if kind == 0 { // host_name
				return string(name)
			}
		}
		return ""
	}
	return ""
}
