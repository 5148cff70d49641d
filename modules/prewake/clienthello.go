package prewake

import (
	"golang.org/x/crypto/cryptobyte"
)

// maxHello bounds the bytes of a connection's start a helloReader reads:
// a ClientHello with post-quantum key shares is about 1.8 KiB; one that
// does not fit in 8 KiB is not read, and the connection goes on as usual.
const maxHello = 8 << 10

// helloReader reads the server name of a TLS ClientHello from the first
// bytes of a connection as they pass (feed), without taking any: the
// handshake's own reader gets every byte. It is done once it has the
// name, or knows there is none to read (not TLS, no SNI, malformed, too
// long).
//
// It parses as the bytes come (R5n): each byte is looked at once, in the
// read that brought it, whatever the cut, and nothing of the hello is
// kept but the record and field it is in and, once reached, the bytes of
// the server_name extension. A client that trickles its hello a byte at
// a time costs a byte's work per byte, and a waiting connection holds
// this struct alone (176 bytes on 64-bit machines) until its server_name
// extension, then room for that extension's bytes, at most its length.
type helloReader struct {
	name string
	done bool

	fed int // bytes of the connection fed, at most maxHello

	// The record layer: the header of the record being read (hdrN of its
	// 5 bytes), then the bytes of its fragment left (inRecord).
	hdr      [5]byte
	hdrN     int
	inRecord int

	// The handshake message, as its fields pass.
	step     helloStep
	num      int       // the number being read, big-endian
	numLeft  int       // its bytes left to read
	skip     int       // bytes left to pass over before then
	then     helloStep // the step after skip
	msgLeft  int       // bytes of the ClientHello's body left
	extsLeft int       // bytes of its extensions left
	extType  int       // the type of the extension being read
	decided  bool      // the name is known (found, or none): the rest is passed over
	found    string    // the name decided, given once the message ends
	sni      []byte    // the server_name extension so far
	sniLeft  int       // its bytes left to read
}

// helloStep is the field of the handshake message a helloReader reads.
type helloStep uint8

const (
	stepMsgType   helloStep = iota // the handshake type: client_hello
	stepMsgLength                  // its 24-bit length
	stepSkip                       // bytes to pass over, then the step then
	// The four length-prefixed fields, in their order (step+1 is the next).
	stepSession     // the session ID's length (version and random passed)
	stepSuites      // the cipher suites' length
	stepCompression // the compression methods' length
	stepExtensions  // the extensions' length
	stepExtType     // an extension's type
	stepExtLength   // an extension's length
	stepSNI         // the server_name extension's bytes
)

// feed gives r the next bytes read from the connection; it returns true
// once r is done, with its server name in r.name ("" for none).
func (r *helloReader) feed(p []byte) bool {
	if r.done {
		return true
	}
	p = p[:min(len(p), maxHello-r.fed)]
	r.fed += len(p)
	for len(p) > 0 && !r.done {
		if r.inRecord == 0 { // a record's header
			if r.hdrN == 0 && p[0] != 22 { // handshake
				r.finish("")
				break
			}
			r.hdr[r.hdrN] = p[0]
			r.hdrN++
			p = p[1:]
			if r.hdrN == len(r.hdr) {
				r.hdrN = 0
				r.inRecord = int(r.hdr[3])<<8 | int(r.hdr[4])
				if r.inRecord == 0 || r.inRecord > 1<<14 {
					r.finish("")
				}
			}
			continue
		}
		k := min(len(p), r.inRecord)
		r.handshake(p[:k])
		r.inRecord -= k
		p = p[k:]
	}
	if !r.done && r.fed >= maxHello {
		r.finish("")
	}
	return r.done
}

// handshake reads p, the next bytes of the handshake message, field by
// field.
func (r *helloReader) handshake(p []byte) {
	for len(p) > 0 && !r.done {
		switch r.step {
		case stepMsgType:
			if p[0] != 1 { // client_hello
				r.finish("")
				return
			}
			p = p[1:]
			r.readNumber(stepMsgLength, 3)
			continue
		case stepMsgLength:
			r.num = r.num<<8 | int(p[0])
			p = p[1:]
			r.numLeft--
			if r.numLeft > 0 {
				continue
			}
			if 4+r.num > maxHello {
				r.finish("")
				return
			}
			r.msgLeft = r.num
			r.skipThen(2+32, stepSession) // version, random
			if r.msgLeft == 0 {
				r.finish("")
			}
			continue
		}
		// The body: every byte counts down msgLeft.
		var k int
		switch r.step {
		case stepSkip:
			k = min(len(p), r.skip, r.msgLeft)
			r.skip -= k
		case stepSNI:
			k = min(len(p), r.sniLeft, r.msgLeft)
			r.sni = appendAtMost(r.sni, p[:k], len(r.sni)+r.sniLeft)
			r.sniLeft -= k
		default: // a number
			k = 1
			r.num = r.num<<8 | int(p[0])
			r.numLeft--
		}
		p = p[k:]
		r.msgLeft -= k
		r.next()
		if r.msgLeft == 0 && !r.done {
			r.finish(r.found) // the whole message passed: "" unless decided with a name
		}
	}
}

// next moves on once the current field is read whole.
func (r *helloReader) next() {
	for !r.decided {
		switch r.step {
		case stepSkip:
			if r.skip > 0 {
				return
			}
			switch r.then {
			case stepSession, stepCompression:
				r.readNumber(r.then, 1)
			case stepSuites, stepExtensions:
				r.readNumber(r.then, 2)
			case stepExtType:
				r.nextExtension()
			}
			return
		case stepSNI:
			if r.sniLeft == 0 {
				r.decide(hostName(r.sni))
			}
			return
		}
		if r.numLeft > 0 {
			return
		}
		n := r.num
		switch r.step {
		case stepSession, stepCompression, stepSuites:
			if n > r.msgLeft {
				r.decide("")
				return
			}
			r.skipThen(n, r.step+1)
		case stepExtensions:
			if n > r.msgLeft {
				r.decide("")
				return
			}
			r.extsLeft = n
			r.nextExtension()
			return
		case stepExtType:
			r.extType = n
			if r.extsLeft < 2 {
				r.decide("")
				return
			}
			r.extsLeft -= 2
			r.readNumber(stepExtLength, 2)
			return
		case stepExtLength:
			if n > r.extsLeft {
				r.decide("")
				return
			}
			r.extsLeft -= n
			if r.extType != 0 { // not server_name
				r.skipThen(n, stepExtType)
				continue
			}
			r.step, r.sniLeft, r.sni = stepSNI, n, make([]byte, 0, min(n, 512))
			continue
		}
	}
}

// nextExtension starts the next extension's type, or decides there is no
// server name.
func (r *helloReader) nextExtension() {
	if r.extsLeft < 2 {
		r.decide("")
		return
	}
	r.extsLeft -= 2
	r.readNumber(stepExtType, 2)
}

// appendAtMost is append(b, p...) with the room it grows to at most
// limit bytes (the server_name extension's length): growing as append
// does, by a quarter or more, went past the extension's end and
// maxHello.
func appendAtMost(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		grown := make([]byte, len(b), min(max(2*cap(b), need), max(limit, need)))
		copy(grown, b)
		b = grown
	}
	return append(b, p...)
}

func (r *helloReader) readNumber(step helloStep, size int) {
	r.step, r.num, r.numLeft = step, 0, size
}

func (r *helloReader) skipThen(n int, then helloStep) {
	r.step, r.skip, r.then = stepSkip, n, then
}

// decide sets the name, the rest of the message passed over (the name is
// given once the message ends, as the handshake will read it whole).
func (r *helloReader) decide(name string) {
	r.found, r.decided, r.sni = name, true, nil
	r.step, r.skip = stepSkip, maxHello // more than any message's rest
}

func (r *helloReader) finish(name string) {
	r.done, r.name, r.sni = true, name, nil
}

// hostName is the host_name of a server_name extension's bytes (RFC
// 6066), "" if it has none or is malformed.
func hostName(ext cryptobyte.String) string {
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
