package testkit

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 6455's accept key is SHA-1 by definition
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// WebSocket is the client end of a websocket connection (RFC 6455),
// enough to test a proxy in front of a real server: text messages, a
// reply to ping, and close. Not for concurrent use.
type WebSocket struct {
	conn net.Conn
	br   *bufio.Reader
}

// MaxWebSocketMessage bounds a message Receive accepts.
const MaxWebSocketMessage = 1 << 20

// wsGUID is RFC 6455's key suffix.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WebSocket opens a websocket to path for host through Caddy, giving up
// when ctx ends, and checks the server's handshake answer.
//
//	ws, err := caddy.WebSocket(ctx, host, "/")
//	defer ws.Close()
//	err = ws.Send("ping")
//	msg, err := ws.Receive(5 * time.Second)
func (c Caddy) WebSocket(ctx context.Context, host, path string) (*WebSocket, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req, err := http.NewRequest(http.MethodGet, "http://"+c.Addr+path, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Host = host
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Sec-WebSocket-Key", key)
	req.Header.Set("Sec-WebSocket-Version", "13")
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		res.Body.Close()
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %s %q", res.Status, body)
	}
	sum := sha1.Sum([]byte(key + wsGUID)) //nolint:gosec // see the import
	if got, want := res.Header.Get("Sec-WebSocket-Accept"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: Sec-WebSocket-Accept %q, want %q", got, want)
	}
	_ = conn.SetDeadline(time.Time{})
	return &WebSocket{conn: conn, br: br}, nil
}

// Send sends text as one text message.
func (w *WebSocket) Send(text string) error {
	return w.writeFrame(0x1, []byte(text))
}

// Receive returns the next text or binary message, waiting at most within;
// it answers pings on the way. A close from the server is an error.
func (w *WebSocket) Receive(within time.Duration) (string, error) {
	_ = w.conn.SetReadDeadline(time.Now().Add(within))
	defer w.conn.SetReadDeadline(time.Time{})
	var msg []byte
	for {
		fin, op, payload, err := w.readFrame()
		if err != nil {
			return "", err
		}
		switch op {
		case 0x8:
			return "", fmt.Errorf("websocket closed by the server: %q", payload)
		case 0x9:
			if err := w.writeFrame(0xA, payload); err != nil {
				return "", err
			}
			continue
		case 0xA:
			continue
		}
		if len(msg)+len(payload) > MaxWebSocketMessage {
			return "", fmt.Errorf("websocket message over %d bytes", MaxWebSocketMessage)
		}
		msg = append(msg, payload...)
		if fin {
			return string(msg), nil
		}
	}
}

// Close sends a close message and closes the connection.
func (w *WebSocket) Close() error {
	_ = w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_ = w.writeFrame(0x8, []byte{0x03, 0xE8}) // 1000: normal closure
	return w.conn.Close()
}

// writeFrame writes one final, masked frame (a client must mask).
func (w *WebSocket) writeFrame(op byte, payload []byte) error {
	hdr := []byte{0x80 | op}
	switch n := len(payload); {
	case n <= 125:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xFFFF:
		hdr = append(hdr, 0x80|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(payload))
	for i, b := range payload {
		masked[i] = b ^ mask[i%4]
	}
	_, err := w.conn.Write(append(hdr, masked...))
	return err
}

// readFrame reads one frame from the server (never masked).
func (w *WebSocket) readFrame() (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(w.br, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[1]&0x80 != 0 {
		return false, 0, nil, errors.New("websocket: the server masked a frame")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(w.br, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(w.br, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > MaxWebSocketMessage {
		return false, 0, nil, fmt.Errorf("websocket frame of %d bytes, over %d", n, MaxWebSocketMessage)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(w.br, payload)
	return
}
