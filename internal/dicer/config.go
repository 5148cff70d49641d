// Package dicer is the adapter for the Dicer daemon: it speaks the daemon's
// gRPC API, follows its events and translates its instances into
// catalog.Instance values fed to a catalog.Sink. It knows nothing of routing
// rules or of Caddy.
package dicer

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// DefaultAddress is the daemon's packaged unix socket.
const DefaultAddress = "unix:///run/dicer/dicer.sock"

// Config is what the adapter needs; the Caddy module fills it from its
// settings. New checks it and reads its file.
type Config struct {
	// Address is the daemon's gRPC target: "unix:///run/dicer/dicer.sock"
	// (DefaultAddress, used when empty), "unix:/path", "unix-abstract:NAME",
	// or "host:port" for the daemon's TCP listener.
	Address string
	// Token is required with a TCP address and refused with a unix socket.
	Token string
	// CAFile and ServerName verify a daemon whose certificate a CA signed
	// (a token without a fingerprint): CAFile is a PEM file of the
	// authorities to trust, read by New ("" means the system roots).
	CAFile     string
	ServerName string
	// Pace bounds the delays between sessions; zero values are the
	// defaults, and on a unix socket a zero ConnectMax is
	// follow.LocalConnectMax.
	Pace follow.Pace
}

func (c Config) address() string {
	if c.Address == "" {
		return DefaultAddress
	}
	return c.Address
}

// Check checks the combination of address, token and TLS settings without
// reading the CA file, so that a config adapted on another machine than the
// one it runs on is checked too. Each error names the setting at fault.
func (c Config) Check() error {
	addr := c.address()
	if err := validateAddress(addr); err != nil {
		return err
	}
	if !IsTCP(addr) {
		if c.Token != "" {
			return setting.With("token", []string{"address"}, "not allowed with a unix socket address %q (the socket needs no token)", addr)
		}
		if c.CAFile != "" || c.ServerName != "" {
			return setting.With("tls", []string{"address"}, "not allowed with a unix socket address %q", addr)
		}
	} else {
		if strings.TrimSpace(c.Token) == "" {
			return setting.With("token", []string{"address"}, "required for the TCP address %q", addr)
		}
		tok, err := ParseToken(c.Token)
		if err != nil {
			return setting.Wrap("token", err)
		}
		if tok.Fingerprint != "" && (c.CAFile != "" || c.ServerName != "") {
			return setting.With("tls", []string{"token"}, "not used with a token that carries the daemon's certificate fingerprint (the fingerprint pins the certificate); drop tls or use a token without a fingerprint")
		}
	}
	return c.Pace.Check()
}

// validateAddress checks that addr is one of the supported target forms.
func validateAddress(addr string) error {
	switch {
	case strings.HasPrefix(addr, "unix-abstract:"):
		if strings.TrimPrefix(addr, "unix-abstract:") == "" {
			return setting.Errorf("address", "%q names no abstract socket", addr)
		}
		return nil
	case strings.HasPrefix(addr, "unix:"):
		if strings.TrimLeft(strings.TrimPrefix(addr, "unix:"), "/") == "" {
			return setting.Errorf("address", "%q names no socket path", addr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(tcpHostPort(addr))
	if err != nil || host == "" || strings.ContainsAny(host, "/ ") {
		return setting.Errorf("address", "%q is none of unix:///path, unix:/path, unix-abstract:NAME or host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return setting.Errorf("address", "%q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// tcpHostPort strips the gRPC resolver schemes a TCP target may carry.
func tcpHostPort(addr string) string {
	for _, p := range []string{"dns:///", "passthrough:///"} {
		if strings.HasPrefix(addr, p) {
			return strings.TrimPrefix(addr, p)
		}
	}
	return addr
}

// IsTCP reports whether address names the daemon's TCP listener rather than
// its unix socket. An empty address is the default socket.
func IsTCP(address string) bool {
	if address == "" {
		return false
	}
	return !strings.HasPrefix(address, "unix:") && !strings.HasPrefix(address, "unix-abstract:")
}

// DaemonHost returns the host part of a TCP address when it is not a
// loopback (or unspecified) address, else "". R4 reaches ports published on
// every host address there.
func DaemonHost(address string) string {
	if !IsTCP(address) {
		return ""
	}
	host, _, err := net.SplitHostPort(tcpHostPort(address))
	if err != nil {
		return ""
	}
	return follow.RemoteHost(host)
}

// listsNetworks reports whether the adapter lists the daemon's networks to
// learn their gateways: only when the daemon's own host is not known from a
// non-loopback TCP address (R9). Without it, a token lacking networks:read
// works.
func listsNetworks(address string) bool {
	return DaemonHost(address) == ""
}

// Token is a parsed Dicer API token: "dicer_" + secret [+ "_" + fingerprint].
type Token struct {
	// Secret is what the daemon checks.
	Secret string
	// Fingerprint is the lowercase hex SHA-256 of the daemon certificate's
	// SubjectPublicKeyInfo, or "" when the token does not pin a certificate.
	Fingerprint string
}

// Value is the whole token, as sent in the authorization header.
func (t Token) Value() string {
	if t.Fingerprint == "" {
		return "dicer_" + t.Secret
	}
	return "dicer_" + t.Secret + "_" + t.Fingerprint
}

// String redacts the secret, so that a Token is safe to log.
func (t Token) String() string {
	if t.Fingerprint == "" {
		return "dicer_<redacted>"
	}
	return "dicer_<redacted>_" + t.Fingerprint
}

// ParseToken parses a token as the daemon does: surrounding whitespace is
// trimmed, the "dicer_" prefix is required, the rest is split at the first
// "_" into a secret of at least 32 ASCII letters or digits and an optional
// fingerprint of 64 lowercase hex characters. Errors never echo the secret.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Token{}, errors.New("malformed: empty")
	}
	rest, ok := strings.CutPrefix(s, "dicer_")
	if !ok {
		return Token{}, errors.New(`malformed: does not start with "dicer_"`)
	}
	secret, fp, hasFP := strings.Cut(rest, "_")
	if len(secret) < 32 {
		return Token{}, fmt.Errorf("malformed: the secret must be at least 32 letters or digits, this one has %d characters", len(secret))
	}
	for i := 0; i < len(secret); i++ {
		if !isAlnum(secret[i]) {
			return Token{}, fmt.Errorf("malformed: the secret may hold only ASCII letters and digits (character %d is not one)", i+1)
		}
	}
	if hasFP {
		if len(fp) != 64 {
			return Token{}, fmt.Errorf("malformed: the fingerprint after the secret must be 64 lowercase hex characters, not %d characters", len(fp))
		}
		for i := 0; i < len(fp); i++ {
			c := fp[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return Token{}, fmt.Errorf("malformed: the fingerprint must be 64 lowercase hex characters (character %d is not)", i+1)
			}
		}
	}
	return Token{Secret: secret, Fingerprint: fp}, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
