package testkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"testing"
	"time"
)

// tlsConfig trusts roots, or, when roots is nil, any certificate (a test
// of Caddy's internal CA that does not load its root).
func tlsConfig(name string, roots *x509.CertPool) *tls.Config {
	if roots == nil {
		return &tls.Config{ServerName: name, InsecureSkipVerify: true} //nolint:gosec // the test's own Caddy's internal CA
	}
	return &tls.Config{ServerName: name, RootCAs: roots}
}

// Handshake completes a TLS handshake with the listener at addr (host:port)
// for the server name name, trusting roots (nil: any certificate), and
// returns the certificate served.
//
//	_, err := testkit.Handshake(ctx, "127.0.0.1:9443", "shop.example.com", nil)
func Handshake(ctx context.Context, addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := tls.Dialer{Config: tlsConfig(name, roots)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	state := conn.(*tls.Conn).ConnectionState()
	_ = conn.Close() // the handshake is all this was for
	return state.PeerCertificates[0], nil
}

// HTTPSClient is a client that sends every request to addr (a Caddy's
// HTTPS listener) whatever its URL's host, which names the site and the
// certificate, trusting roots (nil: any certificate), giving up on a
// request after timeout. Close its idle connections when done.
func HTTPSClient(addr string, roots *x509.CertPool, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig: tlsConfig("", roots),
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
}

// ClientHello is the first flight of a Go TLS client naming name, as it
// goes on the wire: what a client sends before any answer of the
// server's. Write it on a connection to have a server read a ClientHello
// that no handshake follows.
func ClientHello(t testing.TB, name string) []byte {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: name, InsecureSkipVerify: name == ""}).Handshake() //nolint:gosec // no server answers
		_ = client.Close()
	}()
	defer server.Close()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 16<<10)
	for {
		n, err := server.Read(buf)
		out = append(out, buf[:n]...)
		if helloComplete(out) || err != nil {
			return out
		}
	}
}

// helloComplete reports whether b holds a whole first handshake record.
func helloComplete(b []byte) bool {
	return len(b) >= 5 && len(b) >= 5+(int(b[3])<<8|int(b[4]))
}
