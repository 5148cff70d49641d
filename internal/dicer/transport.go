package dicer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// maxRecvMsgSize lifts gRPC's 4 MiB default: a ListInstances reply carries
// the contents of FILE mounts (up to 1 MiB per instance).
const maxRecvMsgSize = 256 << 20

// Keepalive on the TCP listener, as the daemon's own client does. The daemon
// disconnects clients that ping more often than every 10s.
var tcpKeepalive = keepalive.ClientParameters{
	Time:                30 * time.Second,
	Timeout:             10 * time.Second,
	PermitWithoutStream: true,
}

// loadRoots reads the authorities in the PEM file named by the tls ca
// setting ("": none, so nil roots, the system's), and returns the file's
// contents too.
func loadRoots(file string) (*x509.CertPool, []byte, error) {
	if file == "" {
		return nil, nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, setting.Wrap("tls ca", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, nil, setting.Errorf("tls ca", "no PEM certificate in %s", file)
	}
	return roots, pem, nil
}

// dialOptions builds the gRPC options for a checked Config; roots are the
// authorities read from its CAFile (nil: the system roots).
func dialOptions(cfg Config, roots *x509.CertPool) ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	}
	if !IsTCP(cfg.address()) {
		// The socket is plaintext, unauthenticated and never pinged.
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials())), nil
	}
	tok, err := ParseToken(cfg.Token)
	if err != nil {
		return nil, setting.Wrap("token", err)
	}
	return append(opts,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig(roots, cfg.ServerName, tok))),
		grpc.WithPerRPCCredentials(bearer("Bearer "+tok.Value())),
		grpc.WithKeepaliveParams(tcpKeepalive),
	), nil
}

// tlsConfig pins the daemon's certificate when the token carries its
// fingerprint, and otherwise verifies it normally against roots (nil: the
// system roots) and serverName.
func tlsConfig(roots *x509.CertPool, serverName string, tok Token) *tls.Config {
	if tok.Fingerprint == "" {
		return &tls.Config{
			MinVersion: tls.VersionTLS13,
			RootCAs:    roots,
			ServerName: serverName,
		}
	}
	want := tok.Fingerprint
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The pinned certificate is self-signed and names no host: the
		// fingerprint check in VerifyConnection replaces chain and name
		// verification.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyFingerprint(cs, want)
		},
	}
}

// errNoCertificate and the mismatch error are what a user reads in the log
// when the token does not fit the daemon (R12).
var errNoCertificate = errors.New("daemon presented no certificate, so its fingerprint cannot match the token's")

// fingerprintMismatch is the marker the log classification looks for.
const fingerprintMismatch = "does not match the token's"

func verifyFingerprint(cs tls.ConnectionState, want string) error {
	if len(cs.PeerCertificates) == 0 {
		return errNoCertificate
	}
	got := Fingerprint(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
	if got != want {
		return fmt.Errorf("daemon certificate fingerprint %s %s %s", got, fingerprintMismatch, want)
	}
	return nil
}

// Fingerprint is the lowercase hex SHA-256 of a DER SubjectPublicKeyInfo,
// as Dicer tokens carry it.
func Fingerprint(rawSPKI []byte) string {
	sum := sha256.Sum256(rawSPKI)
	return hex.EncodeToString(sum[:])
}

// bearer sends the whole token on every call, only over TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
